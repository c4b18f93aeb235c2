"""A zoo of small real architectures, built from configs with no downloads.

Imported by the dump driver under either tool's environment, so it needs only
torch and transformers. Each builder returns (model, batch) where ``batch()``
gives the next step's inputs and ``loss(model, inputs)`` the training loss.
Dropout probabilities are kept as the architectures have them where they are
0 (LLaMA's attention dropout, a case the reference records) and set to 0
elsewhere, so both tools see the same values; but for GPT-2, which keeps its
dropout of 0.1 and is run after ``seed_all()`` (see ``SEEDED``): the tool's
promise there is that dropout stays off.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn

Builder = Callable[[], tuple[nn.Module, Callable[[int], Any], Callable[[nn.Module, Any], torch.Tensor]]]


def _tokens(vocab: int, batch: int, length: int) -> Callable[[int], Any]:
    def batch_for(step: int) -> torch.Tensor:
        generator = torch.Generator().manual_seed(100 + step)
        return torch.randint(0, vocab, (batch, length + 1), generator=generator)

    return batch_for


def _lm_loss(logits: torch.Tensor, tokens: torch.Tensor) -> torch.Tensor:
    return F.cross_entropy(logits.reshape(-1, logits.shape[-1]), tokens[:, 1:].reshape(-1))


def _causal_lm(model: nn.Module) -> tuple:
    """A HuggingFace causal language model on the zoo's tokens: next-token loss on its logits."""

    def loss(model: nn.Module, tokens: torch.Tensor) -> torch.Tensor:
        return _lm_loss(model(input_ids=tokens[:, :-1]).logits, tokens)

    return model, _tokens(64, 2, 8), loss


def llama() -> tuple:
    from transformers import LlamaConfig, LlamaForCausalLM

    config = LlamaConfig(
        vocab_size=64,
        hidden_size=32,
        intermediate_size=64,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=32,
        attention_dropout=0.0,
    )
    config._attn_implementation = "eager"
    return _causal_lm(LlamaForCausalLM(config))


def bert() -> tuple:
    from transformers import BertConfig, BertForMaskedLM

    config = BertConfig(
        vocab_size=64,
        hidden_size=32,
        num_hidden_layers=2,
        num_attention_heads=4,
        intermediate_size=64,
        max_position_embeddings=32,
        hidden_dropout_prob=0.0,
        attention_probs_dropout_prob=0.0,
    )
    config._attn_implementation = "eager"
    model = BertForMaskedLM(config)

    def loss(model: nn.Module, tokens: torch.Tensor) -> torch.Tensor:
        return model(input_ids=tokens[:, :-1], labels=tokens[:, 1:].contiguous()).loss

    return model, _tokens(64, 2, 8), loss


def t5() -> tuple:
    from transformers import T5Config, T5ForConditionalGeneration

    config = T5Config(
        vocab_size=64,
        d_model=32,
        d_kv=8,
        d_ff=64,
        num_layers=1,
        num_decoder_layers=1,
        num_heads=4,
        dropout_rate=0.0,
        decoder_start_token_id=0,
        pad_token_id=0,
    )
    config._attn_implementation = "eager"
    model = T5ForConditionalGeneration(config)

    def loss(model: nn.Module, tokens: torch.Tensor) -> torch.Tensor:
        return model(input_ids=tokens[:, :-1], labels=tokens[:, 1:].contiguous()).loss

    return model, _tokens(64, 2, 8), loss


class Experts(nn.Module):
    """Top-2 routing over four feed-forward experts, gathered with index_add_."""

    def __init__(self, width: int, count: int = 4, top: int = 2):
        super().__init__()
        self.router = nn.Linear(width, count, bias=False)
        self.experts = nn.ModuleList(
            nn.Sequential(nn.Linear(width, 2 * width), nn.GELU(), nn.Linear(2 * width, width)) for _ in range(count)
        )
        self.top = top

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        flat = x.reshape(-1, x.shape[-1])
        weights, chosen = torch.topk(F.softmax(self.router(flat), dim=-1), self.top, dim=-1)
        out = torch.zeros_like(flat)
        for index, expert in enumerate(self.experts):
            rows, slot = torch.where(chosen == index)
            if rows.numel():
                out.index_add_(0, rows, expert(flat[rows]) * weights[rows, slot].unsqueeze(-1))
        return out.reshape(x.shape)


class MoeLM(nn.Module):
    def __init__(self, vocab: int = 64, width: int = 32):
        super().__init__()
        self.embed = nn.Embedding(vocab, width)
        self.norm = nn.LayerNorm(width)
        self.moe = Experts(width)
        self.head = nn.Linear(width, vocab)

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        x = self.embed(tokens)
        h = self.moe(self.norm(x))
        h += x
        return self.head(h)


def moe() -> tuple:
    model = MoeLM()

    def loss(model: nn.Module, tokens: torch.Tensor) -> torch.Tensor:
        return _lm_loss(model(tokens[:, :-1]), tokens)

    return model, _tokens(64, 2, 8), loss


def vit() -> tuple:
    from transformers import ViTConfig, ViTForImageClassification

    config = ViTConfig(
        image_size=16,
        patch_size=8,
        num_channels=3,
        hidden_size=32,
        num_hidden_layers=2,
        num_attention_heads=4,
        intermediate_size=64,
        hidden_dropout_prob=0.0,
        attention_probs_dropout_prob=0.0,
        num_labels=5,
    )
    config._attn_implementation = "eager"
    model = ViTForImageClassification(config)

    def batch(step: int) -> tuple:
        generator = torch.Generator().manual_seed(200 + step)
        return torch.randn(2, 3, 16, 16, generator=generator), torch.randint(0, 5, (2,), generator=generator)

    def loss(model: nn.Module, inputs: tuple) -> torch.Tensor:
        return model(pixel_values=inputs[0], labels=inputs[1]).loss

    return model, batch, loss


class ConvNet(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv1 = nn.Conv2d(3, 8, 3, padding=1)
        self.bn1 = nn.BatchNorm2d(8)
        self.relu = nn.ReLU(inplace=True)
        self.conv2 = nn.Conv2d(8, 8, 3, padding=1)
        self.bn2 = nn.BatchNorm2d(8)
        self.fc = nn.Linear(8, 5)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.relu(self.bn1(self.conv1(x)))
        x = F.relu(self.bn2(self.conv2(x)), inplace=True)
        return self.fc(F.adaptive_avg_pool2d(x, 1).flatten(1))


def cnn() -> tuple:
    model = ConvNet()

    def batch(step: int) -> tuple:
        generator = torch.Generator().manual_seed(300 + step)
        return torch.randn(4, 3, 8, 8, generator=generator), torch.randint(0, 5, (4,), generator=generator)

    def loss(model: nn.Module, inputs: tuple) -> torch.Tensor:
        return F.cross_entropy(model(inputs[0]), inputs[1])

    return model, batch, loss


class RecurrentLM(nn.Module):
    def __init__(self, vocab: int = 64, width: int = 32):
        super().__init__()
        self.embed = nn.Embedding(vocab, width)
        self.lstm = nn.LSTM(width, width, batch_first=True)
        self.gru = nn.GRU(width, width, batch_first=True)
        self.head = nn.Linear(width, vocab)

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        x, _ = self.lstm(self.embed(tokens))
        x, _ = self.gru(x)
        return self.head(x)


def recurrent() -> tuple:
    model = RecurrentLM()

    def loss(model: nn.Module, tokens: torch.Tensor) -> torch.Tensor:
        return _lm_loss(model(tokens[:, :-1]), tokens)

    return model, _tokens(64, 2, 8), loss


class AttentionLM(nn.Module):
    """Workload W's shape, smaller: pre-norm blocks around nn.MultiheadAttention with a causal mask."""

    def __init__(self, vocab: int = 64, width: int = 32, layers: int = 2):
        super().__init__()
        self.embed = nn.Embedding(vocab, width)
        self.blocks = nn.ModuleList(_Block(width) for _ in range(layers))
        self.head = nn.Linear(width, vocab)

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        x = self.embed(tokens)
        length = tokens.shape[1]
        mask = torch.triu(torch.full((length, length), float("-inf")), diagonal=1)
        for block in self.blocks:
            x = block(x, mask)
        return self.head(x)


class _Block(nn.Module):
    def __init__(self, width: int):
        super().__init__()
        self.norm = nn.LayerNorm(width)
        self.attn = nn.MultiheadAttention(width, 4, batch_first=True)
        self.fc = nn.Linear(width, width)

    def forward(self, x: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        h = self.norm(x)
        x = x + self.attn(h, h, h, attn_mask=mask, need_weights=False)[0]
        return x + F.gelu(self.fc(x), approximate="tanh")


def attention() -> tuple:
    model = AttentionLM()

    def loss(model: nn.Module, tokens: torch.Tensor) -> torch.Tensor:
        return _lm_loss(model(tokens[:, :-1]), tokens)

    return model, _tokens(64, 2, 8), loss


def gpt2(dropout: float = 0.1) -> tuple:
    """Conv1D layers (torch.addmm), and dropout of 0.1 on the embeddings, attention and residuals."""
    from transformers import GPT2Config, GPT2LMHeadModel

    config = GPT2Config(
        vocab_size=64,
        n_positions=32,
        n_embd=32,
        n_layer=2,
        n_head=4,
        resid_pdrop=dropout,
        embd_pdrop=dropout,
        attn_pdrop=dropout,
        bos_token_id=0,
        eos_token_id=0,
    )
    config._attn_implementation = "eager"
    return _causal_lm(GPT2LMHeadModel(config))


def mamba() -> tuple:
    """The slow (pure torch) path: F.conv1d called with its weight and bias as keywords, a selective scan."""
    from transformers import MambaConfig, MambaForCausalLM

    config = MambaConfig(vocab_size=64, hidden_size=32, state_size=4, num_hidden_layers=2, expand=2, conv_kernel=4)
    return _causal_lm(MambaForCausalLM(config))


class _HalfGradient(torch.autograd.Function):
    """Identity forward, a backward that halves the gradient: code the backward runs inside a module's own."""

    @staticmethod
    def forward(ctx: Any, value: torch.Tensor) -> torch.Tensor:
        return value.clone()

    @staticmethod
    def backward(ctx: Any, grad: torch.Tensor) -> torch.Tensor:
        return grad * 0.5


class _CustomBlock(nn.Module):
    def __init__(self, width: int):
        super().__init__()
        self.up, self.down = nn.Linear(width, 2 * width), nn.Linear(2 * width, width)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = _HalfGradient.apply(torch.relu(self.up(x)))
        if h.requires_grad:
            h.register_hook(lambda grad: grad + 1.0)  # a tensor hook, run in this block's backward
        return x + self.down(h)


class CustomBackwardNet(nn.Module):
    """Calls made by the backward: a custom autograd function's backward and a tensor hook, both within a block."""

    def __init__(self, width: int = 16):
        super().__init__()
        self.embed = nn.Linear(8, width)
        self.blocks = nn.ModuleList(_CustomBlock(width) for _ in range(2))
        self.head = nn.Linear(width, 4)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.embed(x)
        for block in self.blocks:
            x = block(x)
        return self.head(x)


def custom_backward() -> tuple:
    model = CustomBackwardNet()

    def batch(step: int) -> tuple[torch.Tensor, torch.Tensor]:
        generator = torch.Generator().manual_seed(300 + step)
        return torch.randn(4, 8, generator=generator), torch.randint(0, 4, (4,), generator=generator)

    def loss(model: nn.Module, inputs: tuple[torch.Tensor, torch.Tensor]) -> torch.Tensor:
        return F.cross_entropy(model(inputs[0]), inputs[1])

    return model, batch, loss


# models run after seed_all(), with their dropout left on: the tools must keep it off (docs/differences.md)
SEEDED = ("gpt2",)

ZOO: dict[str, Builder] = {
    "llama": llama,
    "bert": bert,
    "t5": t5,
    "moe": moe,
    "vit": vit,
    "cnn": cnn,
    "recurrent": recurrent,
    "attention": attention,
    "gpt2": gpt2,
    "mamba": mamba,
    "custom_backward": custom_backward,
}
