"""Compiler faults whose place is known: a wrong decomposition registered for one ATen op, injected into the
backend's compilation, and the FX nodes that op comes from.

A fault is live in a model when the model's output, compiled with it,
moves away from the output compiled without it; the check must then name
the first node of that op. Used by bench/bench_compile_check.py and
tests/torch_backend/test_compile_check.py.
"""

from __future__ import annotations

import sys
from dataclasses import dataclass, field
from pathlib import Path

import torch
import torch._decomp.decompositions
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


def _gelu_backward_truncated(grad, x, approximate="none"):
    """GELU's derivative with 1/sqrt(2 pi) cut to 0.39 (exact GELU; the tanh form's comes out 1.001 times)."""
    if approximate != "none":
        return torch._decomp.decompositions.gelu_backward(grad, x, approximate) * 1.001
    cdf = 0.5 * (1 + torch.erf(x * 0.7071067811865476))
    return grad * (cdf + x * torch.exp(-0.5 * x * x) * 0.39)


def _scaled_backward(reference, scale=1.001):
    """A backward formula whose input gradient comes out ``scale`` times too large."""

    def wrong(*args, **kwargs):
        result = reference(*args, **kwargs)
        if isinstance(result, (tuple, list)):
            return type(result)(result[0] * scale if i == 0 and result[0] is not None else r
                                for i, r in enumerate(result))  # fmt: skip
        return result * scale

    return wrong


_decomp = torch._decomp.decompositions
# wrong backward formulas (the forward untouched): the answer must be the op whose backward they are
BACKWARD_FAULTS = {
    "gelu_backward": ({aten.gelu_backward.default: _gelu_backward_truncated}, {"gelu"}),
    "layer_norm_backward": (
        {aten.native_layer_norm_backward.default: _scaled_backward(_decomp.native_layer_norm_backward)},
        {"layer_norm"},
    ),
    "softmax_backward": (
        {aten._softmax_backward_data.default: _scaled_backward(_decomp._softmax_backward_data)},
        {"softmax"},
    ),
    "tanh_backward": ({aten.tanh_backward.default: _scaled_backward(_decomp.tanh_backward)}, {"tanh"}),
    "silu_backward": ({aten.silu_backward.default: _scaled_backward(_decomp.silu_backward)}, {"silu"}),
}

# what only the fault puts into Inductor's generated code (read off each decomposition above): the kernel
# whose source holds it is the kernel the fault is in
MARKS = {"gelu": "tanh", "layer_norm": "0.001", "softmax": "bfloat16", "addmm": "1.0001", "silu": "1.001"}


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


def model_and_inputs(name: str, device: str = "cpu") -> tuple[torch.nn.Module, tuple]:
    """A model of the check's zoo in eval mode and its inputs, on ``device``."""
    torch.manual_seed(0)
    if name == "block":
        return Block().eval().to(device), (torch.randn(8, 16).to(device),)
    from zoo import ZOO

    model, batch, _ = ZOO[name](0.0) if name == "gpt2" else ZOO[name]()
    inputs = batch(0)
    args = (inputs[0],) if isinstance(inputs, tuple) else (inputs[:, :-1],)
    return model.eval().to(device), tuple(arg.to(device) for arg in args)


def live(model: torch.nn.Module, inputs: tuple, backend: str, decompositions: dict) -> bool:
    """Whether the fault moves the model's compiled output (else no check could name it)."""
    from msprobe.pytorch.compile.check import compiled_output

    clean = compiled_output(model, inputs, backend)
    faulty = compiled_output(model, inputs, backend, decompositions)
    return not torch.allclose(clean, faulty, rtol=1e-6, atol=1e-7)


def compiled_gradients(model: torch.nn.Module, inputs: tuple, backend: str, decompositions: dict | None) -> list:
    """The gradients of the parameters and floating inputs, the model compiled (a fixed cotangent on its output)."""
    from msprobe.pytorch.compile.check import capture, compiler_for

    graph_module, example_inputs = capture(model, inputs)
    leaves = [v.detach().clone().requires_grad_(v.requires_grad) if torch.is_tensor(v) else v for v in example_inputs]
    output = compiler_for(backend, decompositions)(graph_module, leaves)(*leaves)
    output = output[0] if isinstance(output, (list, tuple)) else output
    cotangent = torch.randn(output.shape, generator=torch.Generator().manual_seed(1), dtype=output.dtype)
    cotangent = cotangent.to(output.device)
    (output * cotangent).sum().backward()
    return [leaf.grad for leaf in leaves if torch.is_tensor(leaf) and leaf.grad is not None]


def live_backward(model: torch.nn.Module, inputs: tuple, backend: str, decompositions: dict) -> bool:
    """Whether the fault moves any gradient of the compiled model."""
    clean = compiled_gradients(model, inputs, backend, None)
    faulty = compiled_gradients(model, inputs, backend, decompositions)
    # looser than the forward's: a correct decomposition of a backward rounds differently from the kernel
    return any(not torch.allclose(a, b, rtol=1e-4, atol=1e-6) for a, b in zip(clean, faulty))


@dataclass
class Case:
    model: str
    backend: str
    fault: str
    node: str | None  # the node the check names first
    op: str | None
    node_right: bool  # it is the first node of the fault's op
    kernel: str = ""  # the kernels the check names for that node (Inductor)
    kernel_right: bool | None = None  # one of them is the kernel whose code holds the fault (None: no kernels)
    replay_departs: bool | None = None  # that kernel, replayed alone, departs from eager beyond rounding
    # a forward fault: a gradient departs only in the backward of a node whose forward departs (the derivative
    # of the changed op), never downstream of it (None: not checked)
    backward_contained: bool | None = None


@dataclass
class Score:
    cases: list[Case] = field(default_factory=list)
    clean_flagged: int = 0  # negative controls: clean compiles with any node or kernel departing
    controls: int = 0

    def count(self, what: str) -> tuple[int, int]:
        judged = [getattr(case, what) for case in self.cases if getattr(case, what) is not None]
        return sum(judged), len(judged)


def _faulty_kernels(check, fault: str) -> set[str]:
    """The kernels whose generated code holds the fault's mark (an outside oracle: the decomposition's own
    constant). A model may hold the op in several places; any of these is the fault's."""
    mark = MARKS[fault]
    return {k.kernel.name for k in check.kernels if not k.kernel.extern and mark in k.kernel.source.lower()}


def score(models: list[str], backends: list[str], backward: bool = True, device: str = "cpu") -> Score:
    """Every live fault of every model and backend, and each model compiled clean (the negative control)."""
    from msprobe.pytorch.compile.check import check_compiled

    result = Score()
    for name in models:
        model, inputs = model_and_inputs(name, device)
        for backend in backends:
            clean = check_compiled(model, inputs, backend, forward_only=not backward)  # the negative control
            result.controls += 1
            result.clean_flagged += clean.diagnosis().verdict != "none"
            if backward:
                _score_backward(result, name, model, inputs, backend)
            for fault, (decompositions, ops) in FAULTS.items():
                if not live(model, inputs, backend, decompositions):
                    continue
                check = check_compiled(model, inputs, backend, decompositions, forward_only=True)
                first = check.first
                expected = next((node.node for node in check.nodes if node.op in ops), None)  # in graph order
                case = Case(name, backend, fault, first and first.node, first and first.op,
                            first is not None and first.node == expected)  # fmt: skip
                if check.kernels:
                    case.kernel = first.kernel if first else ""
                    # right: a kernel named for the node holds the fault; and replayed alone, it departs
                    named = _faulty_kernels(check, fault) & set(case.kernel.split(", "))
                    case.kernel_right = bool(named)
                    departing = {value.kernel for value in check.kernel_values() if value.departs}
                    case.replay_departs = bool(named & departing)
                if backward:  # the forward's change reaches the backward, whose other formulas are right
                    with_backward = check_compiled(model, inputs, backend, decompositions, with_kernels=False)
                    changed = {node.node for node in with_backward.nodes if node.departs}
                    case.backward_contained = all(
                        set(gradient.users) <= changed for gradient in with_backward.gradients if gradient.value.departs
                    )
                result.cases.append(case)
    return result


def _score_backward(result: Score, name: str, model, inputs: tuple, backend: str) -> None:
    """Each live backward fault must be named at the last node of its op: the backward meets it first."""
    from msprobe.pytorch.compile.check import check_compiled

    for fault, (decompositions, ops) in BACKWARD_FAULTS.items():
        if not live_backward(model, inputs, backend, decompositions):
            continue
        check = check_compiled(model, inputs, backend, decompositions, with_kernels=False)
        found = check.diagnosis()
        expected = [node.node for node in check.nodes if node.op in ops][-1:]
        named = found.api.split(", ") if found.verdict == "divergence" and found.phase == "backward" else []
        result.cases.append(Case(name, backend, fault, found.api, found.phase, bool(expected) and expected[0] in named))
