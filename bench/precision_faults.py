"""Models with modules that cannot take low precision, for bench_bisect.py and its tests.

Each case is a small network of leaf modules (the bisection's candidates) with zero, one or two injected
modules whose arithmetic fails in bf16 or fp16, and the set of modules that must run in float32, written from
the arithmetic itself:

- ``naive_softmax``: exp(x) / sum(exp(x)) with no max subtracted: exp overflows fp16 (65504) above 11;
- ``tiny_eps_norm``: (x - mean) / sqrt(var + 1e-12) on rows that are all zero (padding): 1e-12 underflows to 0
  in fp16, and 0 / 0 is NaN;
- ``lift`` then ``drop``: a stream lifted to a large magnitude and brought back (a large residual): the small
  signal on top is rounded away where the lifted value is stored in low precision. In ``cast`` mode each
  module casts its input to its own dtype, so both need float32; under autocast only the lift's addition
  rounds (the drop then subtracts in the float32 it is given);
- ``overflowing MLP``: fc1 scaled up past fp16's range and fc2 scaled back down: in ``cast`` mode the value
  overflows wherever it is stored in fp16 (fc1's output, the activation's, fc2's input); under autocast the
  linears alone run in fp16 (the activation runs in the float32 it is given);
- ``accumulate``: a running total of 512 additions in bf16, whose increments drop below the total's spacing;
- ``shrink`` then ``grow``: a value scaled below fp16's smallest subnormal and back: it underflows to zero.

Controls: the same networks with no injected module, where each dtype's rounding stays within the tolerance.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import torch
from torch import nn

WIDTH, ROWS = 16, 12


class NaiveSoftmax(nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        e = torch.exp(x)
        return e / e.sum(-1, keepdim=True)


class TinyEpsNorm(nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        mean = x.mean(-1, keepdim=True)
        variance = (x - mean).square().mean(-1, keepdim=True)
        return (x - mean) / torch.sqrt(variance + 1e-12)


class Shift(nn.Module):
    def __init__(self, by: float):
        super().__init__()
        self.by = by

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x + self.by


class Scale(nn.Module):
    def __init__(self, by: float):
        super().__init__()
        self.by = by

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x * self.by


class Accumulate(nn.Module):
    """A running total of its input added 512 times, one addition after another (as a recurrence or a
    hand-written accumulation does), then averaged: each addition rounds to the total's dtype, and in bf16 (8
    bits) an increment below half the total's spacing is lost."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        total = torch.zeros_like(x)
        for _ in range(512):
            total = total + x
        return total / 512


class MLP(nn.Module):
    def __init__(self, scale: float = 1.0):
        super().__init__()
        self.fc1, self.act, self.fc2 = nn.Linear(WIDTH, 2 * WIDTH), nn.GELU(), nn.Linear(2 * WIDTH, WIDTH)
        with torch.no_grad():
            self.fc1.weight.mul_(scale)
            self.fc1.bias.mul_(scale)
            self.fc2.weight.div_(scale)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.fc2(self.act(self.fc1(x)))


class Net(nn.Module):
    """``stem`` (a linear, bias-free so zero rows stay zero), the injected modules in order, an MLP, a head."""

    def __init__(self, injected: list[tuple[str, nn.Module]], mlp_scale: float = 1.0, logits: float = 1.0):
        super().__init__()
        self.stem = nn.Linear(WIDTH, WIDTH, bias=False)
        with torch.no_grad():
            self.stem.weight.mul_(logits)
        self.order = [name for name, _ in injected]
        for name, module in injected:
            self.add_module(name, module)
        self.mlp = MLP(mlp_scale)
        self.head = nn.Linear(WIDTH, 4)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.stem(x)
        for name in self.order:
            x = getattr(self, name)(x)
        return self.head(self.mlp(x))


def inputs(padded: bool = False) -> torch.Tensor:
    x = torch.randn(ROWS, WIDTH, generator=torch.Generator().manual_seed(3))
    if padded:
        x[-3:] = 0.0  # padding rows
    return x


@dataclass(frozen=True)
class Case:
    name: str
    dtype: str
    mode: str
    build: Callable[[], nn.Module]
    expected: tuple[str, ...]  # the modules that must run in float32; () for a control
    padded: bool = False

    @property
    def control(self) -> bool:
        return not self.expected


def _net(*injected: tuple[str, Callable[[], nn.Module]], mlp_scale: float = 1.0, logits: float = 1.0):
    def build() -> nn.Module:
        torch.manual_seed(0)
        return Net([(name, make()) for name, make in injected], mlp_scale, logits)

    return build


SOFTMAX = ("softmax", NaiveSoftmax)
TINY_NORM = ("norm", TinyEpsNorm)
LIFT_DROP = (("lift", lambda: Shift(1000.0)), ("drop", lambda: Shift(-1000.0)))
SHRINK_GROW = (("shrink", lambda: Scale(1e-9)), ("grow", lambda: Scale(1e9)))
MLP_PARTS = ("mlp.fc1", "mlp.act", "mlp.fc2")

CASES = [
    # exp overflowing fp16 (the stem makes logits of about 15)
    Case("softmax.fp16.cast", "fp16", "cast", _net(SOFTMAX, logits=15.0), ("softmax",)),
    Case("softmax.fp16.autocast", "fp16", "autocast", _net(SOFTMAX, logits=15.0), ("softmax",)),
    # a norm's epsilon below fp16's smallest value, on padding rows
    Case("tiny_eps.fp16.cast", "fp16", "cast", _net(TINY_NORM), ("norm",), padded=True),
    Case("tiny_eps.fp16.autocast", "fp16", "autocast", _net(TINY_NORM), ("norm",), padded=True),
    # a large-magnitude residual: the signal rounded away where the lifted stream is stored
    Case("residual.bf16.cast", "bf16", "cast", _net(*LIFT_DROP), ("lift", "drop")),
    Case(
        "residual.fp16.cast",
        "fp16",
        "cast",
        _net(("lift", lambda: Shift(1e4)), ("drop", lambda: Shift(-1e4))),
        ("lift", "drop"),
    ),
    Case("residual.bf16.autocast", "bf16", "autocast", _net(*LIFT_DROP), ("lift",)),
    # an MLP whose hidden values overflow fp16
    Case("overflow_mlp.fp16.cast", "fp16", "cast", _net(mlp_scale=3e4), MLP_PARTS),
    Case("overflow_mlp.fp16.autocast", "fp16", "autocast", _net(mlp_scale=3e4), ("mlp.fc1", "mlp.fc2")),
    # a long running sum in bf16
    Case("long_sum.bf16.cast", "bf16", "cast", _net(("total", Accumulate)), ("total",)),
    # a value scaled below fp16's smallest subnormal and back
    Case("underflow.fp16.cast", "fp16", "cast", _net(*SHRINK_GROW), ("shrink", "grow")),
    # two faults in one network: each module needed (the softmax of a padding row is a constant row, which the
    # norm then divides by its zero spread)
    Case(
        "softmax_then_norm.fp16.cast",
        "fp16",
        "cast",
        _net(SOFTMAX, TINY_NORM, logits=15.0),
        ("softmax", "norm"),
        padded=True,
    ),
    Case(
        "residual_then_sum.bf16.cast",
        "bf16",
        "cast",
        _net(*LIFT_DROP, ("total", Accumulate)),
        ("lift", "drop", "total"),
    ),
    # controls: the same networks with nothing that low precision breaks
    *[
        Case(f"control.{dtype}.{mode}", dtype, mode, _net(("shift", lambda: Shift(0.5))), ())
        for dtype in ("bf16", "fp16")
        for mode in ("cast", "autocast")
    ],
    Case("control_padded.fp16.cast", "fp16", "cast", _net(("norm", lambda: nn.LayerNorm(WIDTH))), (), padded=True),
]


# Held out: written after the search and the cases above were settled, and never fitted to: the same modules in
# the other dtype (bf16 keeps fp32's range, so what overflows or underflows fp16 is no fault there) and under
# autocast, where only the module whose own arithmetic rounds is named.
HELD_OUT = [
    Case("held.tiny_eps.bf16.cast", "bf16", "cast", _net(TINY_NORM), (), padded=True),
    Case("held.softmax.bf16.cast", "bf16", "cast", _net(SOFTMAX, logits=15.0), ()),
    Case("held.underflow.bf16.cast", "bf16", "cast", _net(*SHRINK_GROW), ()),
    Case("held.overflow_mlp.bf16.cast", "bf16", "cast", _net(mlp_scale=3e4), ()),
    Case(
        "held.residual.fp16.autocast",
        "fp16",
        "autocast",
        _net(("lift", lambda: Shift(1e4)), ("drop", lambda: Shift(-1e4))),
        ("lift",),
    ),
    Case("held.underflow.fp16.autocast", "fp16", "autocast", _net(*SHRINK_GROW), ("shrink",)),
    Case("held.long_sum.fp16.cast", "fp16", "cast", _net(("total", Accumulate)), ("total",)),
]
