"""Compiler faults whose place is known: a wrong decomposition registered for one ATen op, injected into the
backend's compilation, and the FX nodes that op comes from.

A fault is live in a model when the model's output, compiled with it,
moves away from the output compiled without it; the check must then name
the first node of that op. Used by bench/bench_compile_check.py and
tests/torch_backend/test_compile_check.py.
"""

from __future__ import annotations

import sys
from pathlib import Path

import torch
import torch.nn.functional as F

aten = torch.ops.aten
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests" / "conformance"))  # the zoo


def _gelu_as_tanh(x, approximate="none"):
    """Exact GELU lowered as its tanh approximation (and the tanh one with a slightly wrong constant)."""
    constant = 0.7978845608028654 if approximate == "none" else 0.7978
    return 0.5 * x * (1 + torch.tanh(constant * (x + 0.044715 * x**3)))


def _layer_norm_wrong_eps(x, shape, weight=None, bias=None, eps=1e-5):
    """The epsilon dropped from the config: 1e-3 instead."""
    dims = tuple(range(x.dim() - len(shape), x.dim()))
    mean = x.mean(dims, keepdim=True)
    var = x.var(dims, unbiased=False, keepdim=True)
    rstd = torch.rsqrt(var + 1e-3)
    out = (x - mean) * rstd
    if weight is not None:
        out = out * weight
    if bias is not None:
        out = out + bias
    return out, mean, rstd


def _softmax_in_bfloat16(x, dim, half_to_float=False):
    """The exponentials summed in bfloat16: a lowering to lower precision."""
    shifted = (x - x.amax(dim, keepdim=True)).exp()
    return shifted / shifted.to(torch.bfloat16).sum(dim, keepdim=True).to(x.dtype)


def _addmm_scaled(bias, a, b, beta=1, alpha=1):
    """A matrix product off by 1e-4 of itself (a bad kernel's accumulation)."""
    return beta * bias + alpha * (a @ b) * (1 + 1e-4)


def _silu_as_relu_mix(x):
    return x * torch.sigmoid(x * 1.001)


FAULTS = {
    "gelu": ({aten.gelu.default: _gelu_as_tanh}, {"gelu"}),
    "layer_norm": ({aten.native_layer_norm.default: _layer_norm_wrong_eps}, {"layer_norm"}),
    "softmax": ({aten._softmax.default: _softmax_in_bfloat16}, {"softmax"}),
    "addmm": ({aten.addmm.default: _addmm_scaled}, {"linear", "addmm"}),
    "silu": ({aten.silu.default: _silu_as_relu_mix}, {"silu"}),
}


class Block(torch.nn.Module):
    """fc, layer norm, exact GELU, attention-style softmax, fc."""

    def __init__(self):
        super().__init__()
        torch.manual_seed(0)
        self.fc1, self.norm, self.fc2 = torch.nn.Linear(16, 32), torch.nn.LayerNorm(32), torch.nn.Linear(32, 16)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = F.gelu(self.norm(self.fc1(x)))
        weights = torch.softmax(h @ h.transpose(-1, -2) / 4, dim=-1)
        return self.fc2(weights @ h)


def model_and_inputs(name: str) -> tuple[torch.nn.Module, tuple]:
    """A model of the check's zoo in eval mode and its inputs."""
    torch.manual_seed(0)
    if name == "block":
        return Block().eval(), (torch.randn(8, 16),)
    from zoo import ZOO

    model, batch, _ = ZOO[name](0.0) if name == "gpt2" else ZOO[name]()
    inputs = batch(0)
    args = (inputs[0],) if isinstance(inputs, tuple) else (inputs[:, :-1],)
    return model.eval(), args


def live(model: torch.nn.Module, inputs: tuple, backend: str, decompositions: dict) -> bool:
    """Whether the fault moves the model's compiled output (else no check could name it)."""
    from msprobe.pytorch.compile_check import compiled_output

    clean = compiled_output(model, inputs, backend)
    faulty = compiled_output(model, inputs, backend, decompositions)
    return not torch.allclose(clean, faulty, rtol=1e-6, atol=1e-7)


def score(models: list[str], backends: list[str]) -> tuple[list[tuple], int, int, int]:
    """Every live fault of every model and backend: (model, backend, fault, expected ops, answer); and the
    counts named right, live faults, and clean models flagged."""
    from msprobe.pytorch.compile_check import check_compiled

    rows, right, cases, false = [], 0, 0, 0
    for name in models:
        model, inputs = model_and_inputs(name)
        for backend in backends:
            false += check_compiled(model, inputs, backend).first is not None  # the negative control
            for fault, (decompositions, ops) in FAULTS.items():
                if not live(model, inputs, backend, decompositions):
                    continue
                check = check_compiled(model, inputs, backend, decompositions)
                first, cases = check.first, cases + 1
                expected = next((node.node for node in check.nodes if node.op in ops), None)  # in graph order
                named = first is not None and first.node == expected
                right += named
                rows.append((name, backend, fault, first.node if first else None, first.op if first else None, named))
    return rows, right, cases, false
