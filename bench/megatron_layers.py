"""Megatron-style tensor-parallel layers of plain tensors, written as Megatron writes them, for the layout
benchmark's declared layout and the tests of declared layouts: each rank holds rows of a column-parallel weight,
columns of a row-parallel one, and rows of a vocab-parallel embedding; the partial sums are all-reduced (their
backward: the identity)."""

from __future__ import annotations

import torch
import torch.distributed as dist
import torch.nn.functional as F


def all_reduced(y: torch.Tensor, world: int, group: object = None) -> torch.Tensor:
    """``group``: the tensor-parallel ranks' process group (None: every rank of the run)."""
    if world > 1:
        with torch.no_grad():
            dist.all_reduce(y, group=group)
    return y


class _CopyToRanks(torch.autograd.Function):
    """Megatron's entry to a column-parallel layer: the input as it is, and its gradient, which each rank
    makes from its own columns only, added up over the ranks."""

    @staticmethod
    def forward(ctx, x: torch.Tensor, group: object = None) -> torch.Tensor:
        ctx.group = group
        return x

    @staticmethod
    def backward(ctx, grad: torch.Tensor) -> tuple[torch.Tensor, None]:
        grad = grad.clone()
        dist.all_reduce(grad, group=ctx.group)
        return grad, None


class ColumnLinear(torch.nn.Module):
    """``world`` above 1 adds up the input's gradient over the ranks (an input that needs none may leave it
    out: its gradient is never used)."""

    def __init__(self, weight: torch.Tensor, bias: torch.Tensor, world: int = 1, group: object = None):
        super().__init__()
        self.weight, self.bias, self.world = torch.nn.Parameter(weight), torch.nn.Parameter(bias), world
        self.group = group

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if self.world > 1 and x.requires_grad:
            x = _CopyToRanks.apply(x, self.group)
        return F.linear(x, self.weight, self.bias)


class RowLinear(torch.nn.Module):
    """``reduce=False``: a fault, each rank's partial sum handed on without the all-reduce."""

    def __init__(self, weight: torch.Tensor, bias: torch.Tensor, world: int, reduce: bool = True, group: object = None):
        super().__init__()
        self.weight, self.bias, self.world = torch.nn.Parameter(weight), torch.nn.Parameter(bias), world
        self.reduce, self.group = reduce, group

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        partial = F.linear(x, self.weight)
        return (all_reduced(partial, self.world, self.group) if self.reduce else partial) + self.bias


class VocabParallelEmbedding(torch.nn.Module):
    """Rows ``[start, end)`` of the table; a token outside them looks up row 0 and its output is zeroed, so
    the all-reduce adds up each token's one row. ``fault``: ``"unmasked"`` leaves the outputs of tokens outside
    the rows as they are; ``"range"`` takes a shard's first token for one outside it (``<=`` for ``<``)."""

    def __init__(self, table: torch.Tensor, rank: int, world: int, fault: str | None = None):
        super().__init__()
        rows = table.shape[0] // world
        self.start, self.end, self.world, self.fault = rank * rows, (rank + 1) * rows, world, fault
        self.weight = torch.nn.Parameter(table[self.start : self.end].clone())

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        if self.world == 1:
            return F.embedding(tokens, self.weight)
        below = tokens <= self.start if self.fault == "range" else tokens < self.start
        outside = below | (tokens >= self.end)
        local = tokens - self.start
        local[outside] = 0
        out = F.embedding(local, self.weight)
        if self.fault != "unmasked":
            out[outside] = 0.0
        return all_reduced(out, self.world)
