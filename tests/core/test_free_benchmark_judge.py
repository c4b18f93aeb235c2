"""The free benchmark's comparison of an output with its perturbed twin (framework-free)."""

import numpy as np
import pytest

from msprobe.core import free_benchmark
from msprobe.core.dump import float_stats
from msprobe.core.free_benchmark import max_relative_difference


def _by_definition(original: np.ndarray, perturbed: np.ndarray, small: float) -> float:
    """Element by element, as the docs define it: equal nans and equal infs agree, one-sided ones are inf."""
    worst = 0.0
    for o, p in zip(original.astype(np.float64).ravel(), perturbed.astype(np.float64).ravel()):
        if (np.isnan(o) and np.isnan(p)) or (np.isinf(o) and o == p):
            continue
        if not (np.isfinite(o) and np.isfinite(p)):
            return float("inf")
        worst = max(worst, abs(p - o) / max(abs(o), small))
    return worst


@pytest.mark.parametrize("dtype", [np.float16, np.float32, np.float64])
@pytest.mark.parametrize("kernels", [True, False])
def test_finite_values_take_the_short_way_to_the_same_answer(dtype, kernels, monkeypatch):
    monkeypatch.setattr(float_stats, "AVAILABLE", kernels and float_stats.AVAILABLE)
    rng = np.random.default_rng(3)
    original = (rng.standard_normal((7, 33)) * 10).astype(dtype)
    original[0, 0] = 0.0  # below `small`: divided by small
    perturbed = (original.astype(np.float64) * (1 + rng.standard_normal((7, 33)) * 1e-3)).astype(np.float64)
    expected = _by_definition(original, perturbed, 1e-6)
    assert max_relative_difference(original, perturbed, 1e-6) == pytest.approx(expected, rel=1e-12)
    # a transposed (not contiguous) view is measured the same way
    assert max_relative_difference(original.T, perturbed.T, 1e-6) == pytest.approx(expected, rel=1e-12)


@pytest.mark.parametrize(
    "original, perturbed, expected",
    [
        ([1.0, np.nan, 2.0], [1.0, np.nan, 2.0], 0.0),  # nan on both sides agrees
        ([1.0, np.inf, -np.inf], [1.5, np.inf, -np.inf], 0.5),  # the same inf agrees
        ([1.0, np.inf], [1.0, -np.inf], float("inf")),  # opposite infs do not
        ([1.0, 2.0], [1.0, np.nan], float("inf")),  # a nan on one side only
        ([np.nan, np.nan], [np.nan, np.nan], 0.0),  # nothing left to compare
        ([], [], 0.0),
    ],
)
def test_infs_and_nans(original, perturbed, expected):
    original, perturbed = np.array(original, dtype=np.float32), np.array(perturbed, dtype=np.float64)
    assert max_relative_difference(original, perturbed, 1e-6) == expected
    assert _by_definition(original, perturbed, 1e-6) == expected


def test_the_short_way_is_taken_only_when_all_values_are_finite(monkeypatch):
    taken = []
    original_short = free_benchmark.judge._finite_max_relative
    monkeypatch.setattr(
        free_benchmark.judge, "_finite_max_relative", lambda *args: taken.append(args[0].size) or original_short(*args)
    )
    max_relative_difference(np.ones(5, np.float32), np.ones(5), 1e-6)
    max_relative_difference(np.array([1.0, np.nan]), np.array([1.0, np.nan]), 1e-6)
    assert taken == [5, 1]  # the second after the agreeing nans were set aside


def test_a_shape_mismatch_is_infinitely_different():
    assert max_relative_difference(np.ones(3), np.ones(4), 1e-6) == float("inf")


@pytest.mark.parametrize("kernels", [True, False])
def test_a_zero_dimensional_output_is_measured(kernels, monkeypatch):
    """A loss is a 0-d tensor: numpy makes scalars of 0-d results, which cannot be written in place."""
    monkeypatch.setattr(float_stats, "AVAILABLE", kernels and float_stats.AVAILABLE)
    original, perturbed = np.array(2.0, np.float32), np.array(2.5)
    assert max_relative_difference(original, perturbed, 1e-6) == 0.25
    assert max_relative_difference(np.array(np.nan, np.float16), np.array(np.nan), 1e-6) == 0.0


def _numpy_way(original: np.ndarray, perturbed: np.ndarray, small: float) -> float:
    """The formula in numpy's own arithmetic: the kernel must give these very bits."""
    with np.errstate(invalid="ignore", divide="ignore"):
        return float((np.abs(perturbed - original) / np.maximum(np.abs(original), small)).max())


@pytest.mark.skipif(not float_stats.AVAILABLE, reason="msprobe-core was built without its C kernels")
@pytest.mark.parametrize("size", [1, 7, 1000, 100_003])
def test_float64_pairs_are_judged_in_one_pass_to_numpys_bits(size, monkeypatch):
    rng = np.random.default_rng(size)
    original = rng.standard_normal(size) * 10
    original[::7] = 0.0  # below small: divided by small
    perturbed = original * (1 + rng.standard_normal(size) * 1e-3) + rng.standard_normal(size) * 1e-9
    passes = []
    kernel = float_stats.max_relative_of
    monkeypatch.setattr(float_stats, "max_relative_of", lambda *args: passes.append(1) or kernel(*args))
    for small in (1e-6, 2.0**-20):
        assert max_relative_difference(original, perturbed, small) == _numpy_way(original, perturbed, small)
    assert passes == [1, 1]
    assert max_relative_difference(original.reshape(-1, 1), perturbed.reshape(-1, 1), 1e-6) == _numpy_way(
        original, perturbed, 1e-6
    )


@pytest.mark.skipif(not float_stats.AVAILABLE, reason="msprobe-core was built without its C kernels")
def test_the_kernel_leaves_inf_and_nan_to_the_general_rule_and_keeps_numpys_nan():
    assert float_stats.max_relative_of(np.array([1.0, np.inf]), np.array([1.0, np.inf]), 1e-6) is None
    assert float_stats.max_relative_of(np.array([1.0, 2.0]), np.array([np.nan, 2.0]), 1e-6) is None
    zeros = np.zeros(3)
    assert np.isnan(float_stats.max_relative_of(zeros, zeros, 0.0)) and np.isnan(_numpy_way(zeros, zeros, 0.0))
    assert np.isnan(float_stats.max_relative_of(zeros, np.array([0.0, 1.0, 0.0]), 0.0))  # nan beside inf: nan
    assert float_stats.max_relative_of(np.array([1.0, 0.0]), np.array([1.0, 1.0]), 0.0) == np.inf
    with pytest.raises(TypeError, match="float64"):
        float_stats.max_relative_of(np.ones(3, np.float32), np.ones(3), 1e-6)
