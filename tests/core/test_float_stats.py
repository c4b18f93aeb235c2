"""The C kernels behind the dump's statistics: right values, right refusals, the same bits on every path."""

import math
import os
import subprocess
import sys

import numpy as np
import pytest

from msprobe.core.dump import float_stats


def test_the_kernels_were_built():
    # msprobe works without them, but CI builds them and everything below must run
    assert float_stats.AVAILABLE, "msprobe-core's C kernels were not built: is a C compiler installed?"


def _truth(values: np.ndarray) -> tuple[float, float, float, float]:
    wide = values.astype(np.float64)
    return float(wide.max()), float(wide.min()), float(wide.mean()), float(np.sqrt((wide * wide).sum()))


def _ulps(a: float, b: float, dtype) -> float:
    return abs(a - b) / float(np.spacing(dtype(abs(b)) if b else dtype(1e-30)))


@pytest.mark.parametrize("size", [1, 2, 15, 16, 17, 31, 33, 100, 4096, 65537, 1_000_003])
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_statistics_are_the_correctly_rounded_values(size, dtype):
    rng = np.random.default_rng(size)
    values = (rng.standard_normal(size) * 3 + 0.5).astype(dtype)
    maximum, minimum, mean, norm = float_stats.stats_of(values)
    true_max, true_min, true_mean, true_norm = _truth(values)
    assert (maximum, minimum) == (true_max, true_min)
    # sums kept in double: within a unit in the last place of the exact values (float64: a few, for the order)
    tolerance = 1 if dtype == np.float32 else 64
    assert _ulps(mean, true_mean, dtype) <= tolerance
    assert _ulps(norm, true_norm, dtype) <= tolerance
    if dtype == np.float32:  # reported as float32 values, as the frameworks report them
        assert np.float32(mean) == mean and np.float32(norm) == norm


def test_extremes_and_signs():
    big = np.array([-1.0e38, 1.0e38, 1.0, -1.0] * 2, dtype=np.float32)
    maximum, minimum, mean, norm = float_stats.stats_of(big)
    assert (maximum, minimum, mean) == (float(np.float32(1.0e38)), float(np.float32(-1.0e38)), 0.0)
    assert norm == float(np.float32(np.sqrt(4 * np.float64(np.float32(1.0e38)) ** 2 + 4)))
    # a norm beyond float32's range is the caller's to report (as inf, the way torch reports it)
    assert float_stats.stats_of(np.array([3.0e38] * 4, dtype=np.float32)) is None
    negative = -np.arange(1, 40, dtype=np.float32)
    assert float_stats.stats_of(negative)[:2] == (-1.0, -39.0)
    zeros = np.zeros(20, dtype=np.float32)
    zeros[3] = -0.0
    assert float_stats.stats_of(zeros) == (0.0, 0.0, 0.0, 0.0)


@pytest.mark.parametrize("bad", [np.inf, -np.inf, np.nan])
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_inf_and_nan_are_left_to_the_caller(bad, dtype):
    for size in (1, 17, 1000):
        for position in (0, size // 2, size - 1):
            values = np.ones(size, dtype=dtype)
            values[position] = bad
            assert float_stats.stats_of(values) is None


def _torch_rule(values: np.ndarray) -> tuple[float, ...]:
    """What torch reports for data with an inf or nan, from numpy: aminmax and norm give nan for a nan; the sum
    gives nan for a nan or for both infs; the pair holds the finite extremes, else those of the infs, else nan."""
    wide = values.astype(np.float64)
    nan = bool(np.isnan(wide).any())
    with np.errstate(invalid="ignore"):
        total = float(wide.sum())
    finite = wide[np.isfinite(wide)]
    kept = finite if finite.size else wide[~np.isnan(wide)]
    pair = (float(kept.max()), float(kept.min())) if kept.size else (math.nan, math.nan)
    if nan:
        return (math.nan, math.nan, math.nan, math.nan, *pair)
    return (float(wide.max()), float(wide.min()), total, math.inf, *pair)


def _special_stats(values: np.ndarray) -> tuple[float, ...] | None:
    kind = float_stats.FLOAT32 if values.dtype == np.float32 else float_stats.FLOAT64
    return float_stats.nonfinite_stats_at(values.ctypes.data, values.size, kind)


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_data_with_inf_or_nan_gets_torchs_special_values_and_the_finite_extremes(dtype):
    rng = np.random.default_rng(7)
    specials = [np.inf, -np.inf, np.nan]
    for size in (1, 2, 17, 1000, 70_000):
        for chosen in ([0], [1], [2], [0, 1], [0, 2], [1, 2], [0, 1, 2]):
            values = (rng.standard_normal(size) * 5).astype(dtype)
            positions = rng.choice(size, size=min(size, len(chosen)), replace=False)
            values[positions] = [specials[k] for k in chosen[: len(positions)]]
            assert str(_special_stats(values)) == str(_torch_rule(values)), (size, chosen)
        nothing_finite = np.array([specials[k % 3] for k in range(size)], dtype=dtype)
        assert str(_special_stats(nothing_finite)) == str(_torch_rule(nothing_finite))
    assert _special_stats(np.ones(100, dtype=dtype)) is None  # finite: the first kernel's


_KINDS = {
    float_stats.FLOAT32: np.float32,
    float_stats.FLOAT64: np.float64,
    float_stats.FLOAT16: np.float16,
}


@pytest.mark.parametrize("kind", [*_KINDS, float_stats.BFLOAT16])
def test_the_overflow_screen_finds_every_inf_and_nan(kind):
    for size in (1, 7, 8, 9, 63, 64, 65, 1000):
        for position in range(0, size, max(1, size // 9)):
            for bad in (np.inf, -np.inf, np.nan):
                values = _values(kind, size)
                assert not float_stats.any_nonfinite_at(values.ctypes.data, size, kind)
                _put(values, kind, position, bad)
                assert float_stats.any_nonfinite_at(values.ctypes.data, size, kind), (size, position, bad)
                if kind != float_stats.BFLOAT16:  # numpy has no bfloat16 buffers
                    assert float_stats.any_nonfinite_of(values)


def _values(kind: str, size: int) -> np.ndarray:
    """Finite values up to the format's largest, in the format's bytes."""
    if kind == float_stats.BFLOAT16:  # numpy has no bfloat16: the upper halves of float32 values
        largest = np.float32(3.3895314e38)  # bfloat16's largest finite value
        wide = np.linspace(-1, 1, size, dtype=np.float32) * largest
        return (wide.view(np.uint32) >> 16).astype(np.uint16)
    dtype = _KINDS[kind]
    return np.linspace(-1, 1, size).astype(dtype) * np.finfo(dtype).max


def _put(values: np.ndarray, kind: str, position: int, value: float) -> None:
    if kind == float_stats.BFLOAT16:
        values[position] = np.array([value], dtype=np.float32).view(np.uint32)[0] >> 16
    else:
        values[position] = value


def test_every_float32_kernel_gives_the_same_bits():
    from msprobe.core.dump import _kernels

    chosen = _kernels.instruction_set()
    assert chosen == _kernels.instruction_sets()[0]  # the fastest the processor has runs
    assert _kernels.instruction_sets()[-1] == "generic"
    rng = np.random.default_rng(7)
    try:
        for size in (1, 31, 32, 33, 1000, 65536 + 5):
            for scale in (1.0, 1e30, 1e-30):
                values = (rng.standard_normal(size) * scale).astype(np.float32)
                results = []
                for name in _kernels.instruction_sets():
                    _kernels.use_instruction_set(name)
                    results.append(_kernels.float_stats(values))
                assert results == [results[0]] * len(results), (size, scale)
    finally:
        _kernels.use_instruction_set(chosen)
    with pytest.raises(ValueError, match="no 'sse9' kernel"):
        _kernels.use_instruction_set("sse9")


def test_bad_buffers_are_refused_clearly():
    with pytest.raises(TypeError, match="float32 or float64"):
        float_stats.stats_of(np.arange(5, dtype=np.int32))
    with pytest.raises(ValueError, match="at least one element"):
        float_stats.stats_of(np.zeros(0, dtype=np.float32))
    with pytest.raises((ValueError, BufferError)):
        float_stats.stats_of(np.ones((4, 4), dtype=np.float32)[:, 1])  # not contiguous
    with pytest.raises(TypeError, match="float16, float32 or float64"):
        float_stats.any_nonfinite_of(np.arange(5, dtype=np.int8))
    assert float_stats.any_nonfinite_of(np.zeros(0, dtype=np.float32)) is False
    with pytest.raises(ValueError, match="kind"):
        float_stats.stats_at(np.ones(3, dtype=np.float32).ctypes.data, 3, "x")
    with pytest.raises(ValueError, match="positive count"):
        float_stats.stats_at(np.ones(3, dtype=np.float32).ctypes.data, 0, "f")


def test_the_kernels_can_be_switched_off():
    code = (
        "from msprobe.core.dump import float_stats as f; print(f.AVAILABLE, f.stats_of(b'abcd'), f.instruction_set())"
    )
    result = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, env={**os.environ, "MSPROBE_NO_KERNELS": "1"}
    )
    assert result.stdout.split() == ["False", "None", "none"], result.stderr


@pytest.mark.parametrize("size", [1, 15, 16, 17, 33, 4096, 65537, 1_000_003])
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_sums_in_double_are_math_fsum_s_to_double_rounding(size, dtype):
    """The sums a sharded run records beside its statistics, which merge across ranks: exact to the rounding of
    a double sum (against math.fsum, exact), over every path of the kernels (vector body, tails)."""
    rng = np.random.default_rng(size + 7)
    values = (rng.standard_normal(size) * 3 + 0.5).astype(dtype)
    total, squares = float_stats.sums_at(values.ctypes.data, size, "f" if dtype == np.float32 else "d")
    wide = values.astype(np.float64).tolist()
    exact_total, exact_squares = math.fsum(wide), math.fsum(v * v for v in wide)
    bound = size * 2.0**-52  # a sum of n doubles in any order is within n units of rounding of the magnitudes
    assert abs(total - exact_total) <= bound * math.fsum(abs(v) for v in wide)
    assert abs(squares - exact_squares) <= bound * exact_squares


def test_sums_pass_an_inf_or_nan_on_as_they_add_up():
    values = np.array([1.0, np.inf, 2.0], dtype=np.float32)
    assert float_stats.sums_at(values.ctypes.data, 3, "f") == (math.inf, math.inf)
    values[1] = np.nan
    total, squares = float_stats.sums_at(values.ctypes.data, 3, "f")
    assert math.isnan(total) and math.isnan(squares)


@pytest.mark.parametrize("name", ["MSPROBE_NO_FAST_PATH", "MSPROBE_NO_LANE"])
def test_the_fast_path_switch_answers_to_its_former_name_too(monkeypatch, name):
    from msprobe.core.switches import switched_off

    monkeypatch.delenv("MSPROBE_NO_FAST_PATH", raising=False)
    monkeypatch.delenv("MSPROBE_NO_LANE", raising=False)
    assert not switched_off("MSPROBE_NO_FAST_PATH")
    monkeypatch.setenv(name, "1")
    assert switched_off("MSPROBE_NO_FAST_PATH")
    monkeypatch.setenv(name, "0")
    assert not switched_off("MSPROBE_NO_FAST_PATH")
