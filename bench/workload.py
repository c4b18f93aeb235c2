"""Workload W: a 4-layer transformer LM trained on CPU with one thread, and a larger one for devices.

W: vocab 512, width 128, 4 heads, sequence 64, batch 8, AdamW.
large: vocab 32000, width 1024, 16 heads, 12 layers, sequence 512, batch 8 (about a second a step on one GPU).
gpt2: GPT-2 small's shape: vocab 50257, width 768, 12 heads, 12 layers, sequence 1024, batch 8.
``dtype`` (fp32, bf16) sets the parameters' type; the tokens stay integers.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

VOCAB, WIDTH, HEADS, LAYERS, SEQUENCE, BATCH = 512, 128, 4, 4, 64, 8
SIZES = {
    "W": (VOCAB, WIDTH, HEADS, LAYERS, SEQUENCE, BATCH),
    "large": (32000, 1024, 16, 12, 512, 8),
    "gpt2": (50257, 768, 12, 12, 1024, 8),
}
DTYPES = {"fp32": torch.float32, "bf16": torch.bfloat16}


class Layer(nn.Module):
    def __init__(self, width: int = WIDTH, heads: int = HEADS):
        super().__init__()
        self.norm1 = nn.LayerNorm(width)
        self.attn = nn.MultiheadAttention(width, heads, batch_first=True)
        self.norm2 = nn.LayerNorm(width)
        self.fc1 = nn.Linear(width, 4 * width)
        self.fc2 = nn.Linear(4 * width, width)

    def forward(self, x: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        h = self.norm1(x)
        x = x + self.attn(h, h, h, attn_mask=mask, need_weights=False)[0]
        return x + self.fc2(F.gelu(self.fc1(self.norm2(x))))


class LanguageModel(nn.Module):
    def __init__(self, size: str = "W"):
        super().__init__()
        vocab, width, heads, layers, sequence, _batch = SIZES[size]
        self.embed = nn.Embedding(vocab, width)
        self.position = nn.Embedding(sequence, width)
        self.layers = nn.ModuleList(Layer(width, heads) for _ in range(layers))
        self.norm = nn.LayerNorm(width)
        self.head = nn.Linear(width, vocab)

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        device = tokens.device
        positions = torch.arange(tokens.shape[1], device=device)
        x = self.embed(tokens) + self.position(positions)
        mask = torch.triu(torch.full((tokens.shape[1], tokens.shape[1]), float("-inf"), device=device), diagonal=1)
        for layer in self.layers:
            x = layer(x, mask)
        return self.head(self.norm(x))


def synchronize(device: str) -> None:
    """Wait for the device, so a step's time is the step's (the CPU needs no wait)."""
    if device.startswith("cuda"):
        torch.cuda.synchronize()
    elif device.startswith("npu"):
        torch.npu.synchronize()


def make_workload(seed: int = 0, device: str = "cpu", size: str = "W", dtype: str = "fp32"):
    torch.manual_seed(seed)
    vocab, _width, _heads, _layers, sequence, batch = SIZES[size]
    model = LanguageModel(size).to(device=device, dtype=DTYPES[dtype])
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3)
    generator = torch.Generator().manual_seed(seed)
    tokens = torch.randint(0, vocab, (batch, sequence + 1), generator=generator).to(device)

    def train_step() -> None:
        logits = model(tokens[:, :-1])
        loss = F.cross_entropy(logits.reshape(-1, vocab), tokens[:, 1:].reshape(-1))
        loss.backward()
        optimizer.step()
        optimizer.zero_grad()
        synchronize(device)

    train_step.optimizer = optimizer  # for tools that attach to it (the monitor)
    return model, train_step
