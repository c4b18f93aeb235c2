"""run_ut against an independent oracle: mpmath at 50 digits.

For each API, a float32 call (the "device" output, as a tensor dump records it) is checked by run_ut,
which re-runs it on the CPU in float64 as its benchmark. The oracle computes the exact result of the same
inputs with mpmath and rounds it once to float64; run_ut's reported maximum absolute error must then be
the device output's distance from the oracle, to within float64 rounding. A wrong benchmark (an API run
in the wrong precision, a mis-rebuilt argument) would move it far beyond that.
"""

from __future__ import annotations

from pathlib import Path

import mpmath
import numpy as np
import pytest
import torch

from msprobe.core.dump.reader import Dump
from msprobe.pytorch.precheck.run_ut import ApiRunner

mpmath.mp.dps = 50
M = mpmath.mpf


def _sigmoid(x):
    return 1 / (1 + mpmath.exp(-x))


def _softplus(x):
    return mpmath.log(1 + mpmath.exp(x))


def _gelu(x):
    return x * (1 + mpmath.erf(x / mpmath.sqrt(2))) / 2


# name -> (the oracle of one element, the range its inputs are drawn from); abs and neg are judged bit for bit
UNARY = {
    "exp": (mpmath.exp, (-3, 3)),
    "log": (mpmath.log, (0.1, 5)),
    "log1p": (lambda x: mpmath.log(1 + x), (-0.5, 3)),
    "expm1": (lambda x: mpmath.exp(x) - 1, (-2, 2)),
    "log2": (lambda x: mpmath.log(x, 2), (0.1, 5)),
    "log10": (mpmath.log10, (0.1, 5)),
    "exp2": (lambda x: mpmath.power(2, x), (-3, 3)),
    "sqrt": (mpmath.sqrt, (0.01, 9)),
    "rsqrt": (lambda x: 1 / mpmath.sqrt(x), (0.01, 9)),
    "reciprocal": (lambda x: 1 / x, (0.5, 4)),
    "sin": (mpmath.sin, (-3, 3)),
    "cos": (mpmath.cos, (-3, 3)),
    "tan": (mpmath.tan, (-1.2, 1.2)),
    "asin": (mpmath.asin, (-0.95, 0.95)),
    "acos": (mpmath.acos, (-0.95, 0.95)),
    "atan": (mpmath.atan, (-3, 3)),
    "sinh": (mpmath.sinh, (-3, 3)),
    "cosh": (mpmath.cosh, (-3, 3)),
    "tanh": (mpmath.tanh, (-3, 3)),
    "asinh": (mpmath.asinh, (-3, 3)),
    "acosh": (mpmath.acosh, (1.1, 5)),
    "atanh": (mpmath.atanh, (-0.9, 0.9)),
    "sigmoid": (_sigmoid, (-5, 5)),
    "erf": (mpmath.erf, (-2, 2)),
    "erfc": (mpmath.erfc, (-2, 2)),
    "square": (lambda x: x * x, (-3, 3)),
    "sinc": (lambda x: mpmath.sin(mpmath.pi * x) / (mpmath.pi * x), (0.1, 3)),
    "erfinv": (mpmath.erfinv, (-0.9, 0.9)),
}
FUNCTIONAL = {
    "gelu": (_gelu, (-3, 3)),
    "silu": (lambda x: x * _sigmoid(x), (-3, 3)),
    "softplus": (_softplus, (-3, 3)),
    "mish": (lambda x: x * mpmath.tanh(_softplus(x)), (-3, 3)),
    "elu": (lambda x: x if x > 0 else mpmath.exp(x) - 1, (-3, 3)),
    "logsigmoid": (lambda x: mpmath.log(_sigmoid(x)), (-3, 3)),
    "softsign": (lambda x: x / (1 + abs(x)), (-3, 3)),
    "tanhshrink": (lambda x: x - mpmath.tanh(x), (-3, 3)),
}
BINARY = {
    "add": lambda a, b: a + b,
    "sub": lambda a, b: a - b,
    "mul": lambda a, b: a * b,
    "div": lambda a, b: a / b,
    "atan2": mpmath.atan2,
    "hypot": lambda a, b: mpmath.sqrt(a * a + b * b),
    "pow": mpmath.power,
}


def _softmax(xs):
    exps = [mpmath.exp(x) for x in xs]
    total = mpmath.fsum(exps)
    return [value / total for value in exps]


REDUCTIONS = {
    "sum": lambda xs: [mpmath.fsum(xs)],
    "mean": lambda xs: [mpmath.fsum(xs) / len(xs)],
    "softmax": _softmax,
    "logsumexp": lambda xs: [mpmath.log(mpmath.fsum(mpmath.exp(x) for x in xs))],
    "cumsum": lambda xs: [mpmath.fsum(xs[: i + 1]) for i in range(len(xs))],
}


def _inputs(name: str, low: float, high: float, count: int = 64) -> np.ndarray:
    generator = np.random.default_rng(abs(hash(name)) % 2**32)
    return generator.uniform(low, high, count).astype(np.float32)


def _summary(name: str, array: np.ndarray) -> dict:
    return {"type": "torch.Tensor", "dtype": "torch.float32", "shape": list(array.shape), "requires_grad": False,
            "data_name": name}  # fmt: skip


def _run_ut(key: str, arrays: list[np.ndarray], kwargs: dict, device_output: np.ndarray) -> float:
    """run_ut's 最大绝对误差 for the forward output of ``key`` called on ``arrays``."""
    name = f"{key}.0.forward"
    files = {f"{name}.input.{i}.pt": array for i, array in enumerate(arrays)}
    files[f"{name}.output.0.pt"] = device_output
    entry = {
        "input_args": [_summary(f"{name}.input.{i}.pt", a) for i, a in enumerate(arrays)],
        "input_kwargs": kwargs,
        "output": [_summary(f"{name}.output.0.pt", device_output)],
    }
    dump = Dump(Path("<oracle>"), "tensor", "L1", "pytorch", {name: entry}, arrays=files)
    outcome = ApiRunner(dump, "cpu", False).run(name)
    [detail] = [d for d in outcome.details if d.name.endswith("forward.output.0")]
    return float(detail.values["最大绝对误差"])


def _check(key: str, arrays: list[np.ndarray], kwargs: dict, device: np.ndarray, exact: list) -> None:
    oracle = np.array([float(value) for value in exact], dtype=np.float64).reshape(device.shape)
    expected = float(np.max(np.abs(device.astype(np.float64) - oracle)))
    reported = _run_ut(key, arrays, kwargs, device)
    scale = float(np.max(np.abs(oracle))) + 1.0
    assert abs(reported - expected) <= 1e-12 * scale, (key, reported, expected)


CASES = [("Torch", n) for n in UNARY] + [("Functional", n) for n in FUNCTIONAL]


@pytest.mark.parametrize(("kind", "api"), CASES, ids=[f"{k}.{a}" for k, a in CASES])
def test_unary_api_benchmark_matches_mpmath(kind, api):
    oracle, (low, high) = (UNARY if kind == "Torch" else FUNCTIONAL)[api]
    x = _inputs(api, low, high)
    call = getattr(torch, api) if kind == "Torch" else getattr(torch.nn.functional, api)
    device = call(torch.from_numpy(x)).numpy()
    _check(f"{kind}.{api}", [x], {}, device, [oracle(M(float(v))) for v in x])


@pytest.mark.parametrize("api", list(BINARY))
def test_binary_api_benchmark_matches_mpmath(api):
    a, b = _inputs(api + "a", 0.5, 3), _inputs(api + "b", 0.5, 3)
    device = getattr(torch, api)(torch.from_numpy(a), torch.from_numpy(b)).numpy()
    _check(f"Torch.{api}", [a, b], {}, device, [BINARY[api](M(float(u)), M(float(v))) for u, v in zip(a, b)])


@pytest.mark.parametrize("api", list(REDUCTIONS))
def test_reduction_benchmark_matches_mpmath(api):
    x = _inputs(api, -2, 2)
    kwargs = {"dim": {"type": "int", "value": 0}} if api in ("softmax", "logsumexp", "cumsum") else {}
    call_kwargs = {"dim": 0} if kwargs else {}
    device = np.asarray(getattr(torch, api)(torch.from_numpy(x), **call_kwargs).numpy()).reshape(-1)
    exact = REDUCTIONS[api]([M(float(v)) for v in x])
    oracle_shape_device = device.reshape(-1) if device.size > 1 else device.reshape(())
    _check(f"Torch.{api}", [x], kwargs, oracle_shape_device, exact)


def test_matmul_benchmark_matches_mpmath():
    a, b = _inputs("mma", -1, 1, 48).reshape(6, 8), _inputs("mmb", -1, 1, 40).reshape(8, 5)
    device = torch.matmul(torch.from_numpy(a), torch.from_numpy(b)).numpy()
    exact = [mpmath.fsum(M(float(a[i, k])) * M(float(b[k, j])) for k in range(8)) for i in range(6) for j in range(5)]
    _check("Torch.matmul", [a, b], {}, device, exact)
