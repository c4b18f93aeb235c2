"""Models, layouts and injected faults for bench_layouts.py and its tests: a sharded run against a golden run of
one process, on the same seed and global batch.

Three models (an MLP, a transformer LM, a mixture of experts), each trained for one step in one process (the
golden run) and over two processes in four layouts: ``tp`` (DTensor tensor parallelism), ``tp_sp`` (tensor
parallelism with sequence parallelism on the norms), ``fsdp2`` (``fully_shard``) and ``ddp``. The two data
parallel layouts give each rank its share of the global batch along dimension 0.

A fault changes one thing in the sharded run only. ``Expect`` says where it is, written from the change itself:
the module whose code, state or gradient it touches, the API its first changed call has, and the ranks it sits
on (None: every rank). A control changes nothing: the same arithmetic in another layout.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn

BATCH, SEQUENCE = 8, 8
LAYOUTS = ("tp", "tp_sp", "fsdp2", "ddp")


# -- models -------------------------------------------------------------------------------------------------


class MLP(nn.Module):
    """A norm and a two-layer feed-forward block on a sequence of feature vectors, then a classifier."""

    classes = 8

    def __init__(self, width: int = 16):
        super().__init__()
        self.norm = nn.LayerNorm(width)
        self.fc1 = nn.Linear(width, 4 * width)
        self.act = nn.GELU()
        self.fc2 = nn.Linear(4 * width, width)
        self.head = nn.Linear(width, self.classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.head(self.fc2(self.act(self.fc1(self.norm(x)))))


class Attention(nn.Module):
    def __init__(self, width: int, heads: int):
        super().__init__()
        self.head_dim = width // heads
        self.q, self.k, self.v = nn.Linear(width, width), nn.Linear(width, width), nn.Linear(width, width)
        self.o = nn.Linear(width, width)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        batch, length = x.shape[0], x.shape[1]
        # -1 heads: a tensor-parallel rank holds its share of them
        q, k, v = (f(x).view(batch, length, -1, self.head_dim).transpose(1, 2) for f in (self.q, self.k, self.v))
        scores = q @ k.transpose(-2, -1) / math.sqrt(self.head_dim)
        mask = torch.triu(torch.ones(length, length, dtype=torch.bool), diagonal=1)
        weights = torch.softmax(scores.masked_fill(mask, float("-inf")), dim=-1)
        return self.o((weights @ v).transpose(1, 2).reshape(batch, length, -1))


class FeedForward(nn.Module):
    def __init__(self, width: int, hidden: int):
        super().__init__()
        self.fc1, self.act, self.fc2 = nn.Linear(width, hidden), nn.GELU(), nn.Linear(hidden, width)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.fc2(self.act(self.fc1(x)))


class Block(nn.Module):
    def __init__(self, width: int, heads: int, dropout: float = 0.0):
        super().__init__()
        self.ln1, self.attn = nn.LayerNorm(width), Attention(width, heads)
        self.drop = nn.Dropout(dropout)
        self.ln2, self.mlp = nn.LayerNorm(width), FeedForward(width, 4 * width)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x + self.drop(self.attn(self.ln1(x)))
        return x + self.mlp(self.ln2(x))


class LM(nn.Module):
    """A two-block GPT-style language model."""

    vocab = 64

    def __init__(self, width: int = 32, heads: int = 4, dropout: float = 0.0):
        super().__init__()
        self.embed = nn.Embedding(self.vocab, width)
        self.position = nn.Embedding(SEQUENCE, width)
        self.blocks = nn.ModuleList([Block(width, heads, dropout) for _ in range(2)])
        self.ln_f = nn.LayerNorm(width)
        self.head = nn.Linear(width, self.vocab)

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        x = self.embed(tokens) + self.position(torch.arange(tokens.shape[1]))
        for block in self.blocks:
            x = block(x)
        return self.head(self.ln_f(x))


class MoELayer(nn.Module):
    """A top-1 router over expert feed-forward blocks, added to its input."""

    def __init__(self, width: int, experts: int):
        super().__init__()
        self.router = nn.Linear(width, experts)
        self.experts = nn.ModuleList([FeedForward(width, 2 * width) for _ in range(experts)])

    def forward(self, h: torch.Tensor) -> torch.Tensor:
        probabilities = torch.softmax(self.router(h), dim=-1)
        weight, choice = probabilities.max(dim=-1)
        mixed = torch.zeros_like(h)
        for index, expert in enumerate(self.experts):
            chosen = choice == index
            if chosen.any():
                mixed[chosen] = expert(h[chosen]) * weight[chosen].unsqueeze(-1)
        return h + mixed


class MoE(nn.Module):
    """A norm, a mixture of four experts, and a classifier."""

    classes = 8

    def __init__(self, width: int = 16, experts: int = 4):
        super().__init__()
        self.norm = nn.LayerNorm(width)
        self.moe = MoELayer(width, experts)
        self.head = nn.Linear(width, self.classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.head(self.moe(self.norm(x)))


def _lm(dropout: float = 0.0) -> Callable[[], nn.Module]:
    return lambda: LM(dropout=dropout)


MODELS: dict[str, Callable[[], nn.Module]] = {"mlp": MLP, "lm": _lm(), "lm_dropout": _lm(0.1), "moe": MoE}


def batch(model_name: str) -> tuple[torch.Tensor, torch.Tensor]:
    """The global batch and its targets, the same in every run."""
    generator = torch.Generator().manual_seed(7)
    if model_name.startswith("lm"):
        tokens = torch.randint(0, LM.vocab, (BATCH, SEQUENCE + 1), generator=generator)
        return tokens[:, :-1], tokens[:, 1:]
    inputs = torch.randn(BATCH, SEQUENCE, 16, generator=generator)
    return inputs, torch.randint(0, 8, (BATCH, SEQUENCE), generator=generator)


def loss_of(output: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
    return F.cross_entropy(output.reshape(-1, output.shape[-1]), targets.reshape(-1))


# -- layouts ------------------------------------------------------------------------------------------------


def tp_plan(model: nn.Module, sequence_parallel: bool) -> dict[str, Any]:
    """Column-parallel linears into row-parallel ones; with sequence parallelism the norms shard the sequence."""
    from torch.distributed.tensor import Replicate, Shard
    from torch.distributed.tensor.parallel import (
        ColwiseParallel,
        PrepareModuleInput,
        RowwiseParallel,
        SequenceParallel,
    )

    gathered = {"input_layouts": Shard(1)} if sequence_parallel else {}
    scattered = {"output_layouts": Shard(1)} if sequence_parallel else {}
    plan: dict[str, Any] = {}
    if isinstance(model, MLP):
        plan = {"fc1": ColwiseParallel(**gathered), "fc2": RowwiseParallel(**scattered)}
        if sequence_parallel:
            plan["norm"] = SequenceParallel()
            plan["head"] = ColwiseParallel(input_layouts=Shard(1), output_layouts=Replicate())
    elif isinstance(model, LM):
        for index in range(len(model.blocks)):
            block = f"blocks.{index}"
            for name in ("q", "k", "v"):
                plan[f"{block}.attn.{name}"] = ColwiseParallel(**gathered)
            plan[f"{block}.attn.o"] = RowwiseParallel(**scattered)
            plan[f"{block}.mlp.fc1"] = ColwiseParallel(**gathered)
            plan[f"{block}.mlp.fc2"] = RowwiseParallel(**scattered)
            if sequence_parallel:
                plan[f"{block}.ln1"] = SequenceParallel()
                plan[f"{block}.ln2"] = SequenceParallel()
        if sequence_parallel:
            plan["blocks.0"] = PrepareModuleInput(
                input_layouts=(Replicate(),), desired_input_layouts=(Shard(1),), use_local_output=True
            )
            plan["ln_f"] = SequenceParallel()
            plan["head"] = ColwiseParallel(input_layouts=Shard(1), output_layouts=Replicate())
    elif isinstance(model, MoE):
        for index in range(len(model.moe.experts)):
            plan[f"moe.experts.{index}.fc1"] = ColwiseParallel()
            plan[f"moe.experts.{index}.fc2"] = RowwiseParallel()
        if sequence_parallel:
            plan["norm"] = SequenceParallel(use_local_output=True)
            plan["moe"] = PrepareModuleInput(
                input_layouts=(Shard(1),), desired_input_layouts=(Replicate(),), use_local_output=True
            )
    return plan


def lay_out(model: nn.Module, layout: str, world: int, before: Callable[[nn.Module], Any] | None = None) -> nn.Module:
    """``model`` in ``layout`` over ``world`` processes (torch.distributed is up)."""
    from torch.distributed.device_mesh import init_device_mesh

    mesh = init_device_mesh("cpu", (world,))
    if layout in ("tp", "tp_sp"):
        from torch.distributed.tensor.parallel import parallelize_module

        return parallelize_module(model, mesh, tp_plan(model, layout == "tp_sp"))
    if layout == "fsdp2":
        from torch.distributed.fsdp import fully_shard

        options = before(model) if before is not None else {}
        for module in _shardable(model):
            fully_shard(module, mesh=mesh, **(options or {}))
        return fully_shard(model, mesh=mesh, **(options or {}))
    if layout == "ddp":
        options = before(model) if before is not None else {}
        return nn.parallel.DistributedDataParallel(model, **(options or {}))
    raise ValueError(f"no layout {layout!r}")


def _shardable(model: nn.Module) -> list[nn.Module]:
    """The modules FSDP2 shards one by one: each block or expert, else each linear."""
    if isinstance(model, LM):
        return list(model.blocks)
    if isinstance(model, MoE):
        return list(model.moe.experts)
    return [module for module in model.children() if isinstance(module, nn.Linear)]


def data_parallel(layout: str) -> bool:
    return layout in ("fsdp2", "ddp")


def share_of(model_name: str, layout: str, inputs: torch.Tensor, targets: torch.Tensor, rank: int, world: int):
    """What one rank is given of the global batch: its share of the batch in data parallelism; of the sequence
    for a sequence-parallel model whose first module is a sequence-parallel norm (the LM shards after its
    embeddings itself); all of it otherwise."""
    if data_parallel(layout):
        return inputs.chunk(world)[rank], targets.chunk(world)[rank]
    if layout == "tp_sp" and not model_name.startswith("lm"):
        return inputs.chunk(world, dim=1)[rank], targets
    return inputs, targets


# -- faults -------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Expect:
    """Where a fault is: the module's path, the API kind of its first changed call (None: not scored), and the
    ranks it sits on (None: every rank)."""

    module: str | None
    api: str | None
    ranks: tuple[int, ...] | None = None


@dataclass
class Run:
    """What a fault may change in the sharded run: before the layout is applied (``model``), how the layout is
    applied (``layout_options``), the run itself once laid out (``laid_out``), and the batch."""

    model: nn.Module
    rank: int
    world: int
    inputs: torch.Tensor
    targets: torch.Tensor
    layout_options: Callable[[nn.Module], dict] | None = None
    after_layout: list[Callable[[nn.Module], None]] = field(default_factory=list)
    after_backward: list[Callable[[nn.Module], None]] = field(default_factory=list)


@dataclass(frozen=True)
class Case:
    name: str
    model: str
    layout: str
    fault: Callable[[Run], None] | None = None
    expect: Expect | None = None  # None: a control

    @property
    def control(self) -> bool:
        return self.fault is None


CONTROLS = [Case(f"{model}.{layout}.control", model, layout) for model in ("mlp", "lm", "moe") for layout in LAYOUTS]
CASES: list[Case] = [*CONTROLS]
