"""CPU MindSpore tensors are measured by msprobe-core's C kernels, and agree with the numpy measurement they replace."""

import math

import mindspore as ms
import numpy as np
import pytest

from msprobe.core.dump import float_stats
from msprobe.mindspore.dump.tensors import measure


def _cases() -> dict[str, ms.Tensor]:
    rng = np.random.default_rng(0)
    with_nan = rng.standard_normal(64).astype(np.float32)
    with_nan[5] = np.nan
    return {
        "float32": ms.Tensor(rng.standard_normal((30, 17)).astype(np.float32) * 3 + 1),
        "float64": ms.Tensor(rng.standard_normal(99)),
        "float16": ms.Tensor(rng.standard_normal(70).astype(np.float16)),
        "bfloat16": ms.Tensor(rng.standard_normal(70).astype(np.float32)).astype(ms.bfloat16),
        "int32": ms.Tensor(np.arange(-4, 9, dtype=np.int32)),
        "with nan": ms.Tensor(with_nan),
    }


@pytest.mark.parametrize("case", list(_cases()))
def test_kernels_and_numpy_agree(case, monkeypatch):
    tensor = _cases()[case]
    with_kernels = measure(tensor)
    monkeypatch.setattr(float_stats, "AVAILABLE", False)
    by_numpy = measure(tensor)
    assert with_kernels.keys() == by_numpy.keys()
    for key, expected in by_numpy.items():
        value = with_kernels[key]
        if isinstance(expected, float) and math.isnan(expected):
            assert math.isnan(value), key
        elif isinstance(expected, float):
            assert math.isclose(value, expected, rel_tol=2e-6, abs_tol=1e-6), (key, value, expected)
        else:
            assert value == expected, key


def test_float32_statistics_are_the_kernels_values():
    tensor = _cases()["float32"]
    stats = measure(tensor)
    assert tuple(stats[key] for key in ("Max", "Min", "Mean", "Norm")) == float_stats.stats_of(tensor.asnumpy())


@pytest.mark.parametrize("kernels", [True, False])
def test_the_overflow_screen(kernels, monkeypatch):
    from msprobe.mindspore.dump.tensors import TensorSummarizer

    monkeypatch.setattr(float_stats, "AVAILABLE", kernels)
    screen = TensorSummarizer("overflow_check", "statistics")
    largest = np.full(40, 60000, dtype=np.float16)  # finite, though their sum is not
    assert not screen.nonfinite(ms.Tensor(largest))
    for dtype in (np.float16, np.float32, np.float64):
        values = np.linspace(-3, 3, 50).astype(dtype)
        assert not screen.nonfinite(ms.Tensor(values))
        for bad in (np.inf, -np.inf, np.nan):
            broken = values.copy()
            broken[17] = bad
            assert screen.nonfinite(ms.Tensor(broken)), (dtype, bad)
