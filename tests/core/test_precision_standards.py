"""The precision standards at both sides of every threshold, per dtype, as the reference's docs define them.

Each case builds a benchmark (float64) and a device output whose error sits just inside or just outside a
threshold, runs them through run_ut's metrics (compare_output) and api_precision_compare's judgement
(judge_row), and expects the verdict the docs give: the absolute-threshold standard fails any normal
value whose relative error passes rtol and any small value whose absolute error passes small_value_atol
(thresholds from api_precision_threshold.yaml); the ULP standard passes float16/bfloat16 when fewer than
0.1% of elements are over 1 ULP, float32 when the mean is under 64 ULP or under 5% are over 32 ULP (or
when the other device does worse);
the thousandth standard (conv) passes above 0.999; binary consistency fails on any differing bit; the
benchmark standard fails a ratio to the other device's error over its limit. The device side is built
first from values its dtype holds exactly, and the benchmark placed from it, so no rounding moves a
case across its threshold. (The accumulative-error standard lists no real API in the reference's table.)
"""

from __future__ import annotations

import numpy as np
import pytest

from msprobe.core.precheck.metrics import DETAIL_COLUMNS, ERROR, PASS, compare_output
from msprobe.core.precheck.precision_compare import judge_row
from msprobe.core.precheck.standards import threshold_table

DTYPES = {"torch.float16": np.float16, "torch.bfloat16": np.float32, "torch.float32": np.float32}
MANTISSA = {"torch.float16": 10, "torch.bfloat16": 7, "torch.float32": 23}


def _exact(values: list[float], dtype: str) -> np.ndarray:
    """Device values its dtype holds exactly (bfloat16 travels widened to float32, as run_ut reads it)."""
    array = np.asarray(values, dtype=np.float64)
    if dtype == "torch.bfloat16":  # keep the top 8 bits of the float32 mantissa
        bits = array.astype(np.float32).view(np.uint32) & np.uint32(0xFFFF0000)
        return bits.view(np.float32)
    return array.astype(DTYPES[dtype])


def _verdict(api: str, bench: np.ndarray, device: np.ndarray, dtype: str, gpu_device: np.ndarray | None = None):
    """api_precision_compare's verdict for the device against a benchmark, the other device given or equal."""

    def details(output: np.ndarray) -> dict[str, str]:
        detail = compare_output(f"Torch.{api}.0.forward.output.0", api, bench, output, "torch.float64", dtype)
        return {column: str(value) for column, value in zip(DETAIL_COLUMNS, detail.row())}

    npu = details(device)
    gpu = details(gpu_device if gpu_device is not None else device)
    return judge_row(f"Torch.{api}.0.forward.output.0", npu, gpu).status


ABSOLUTE_CASES = [(api, dtype) for api, per_dtype in threshold_table().items() for dtype in per_dtype]


@pytest.mark.parametrize(("api", "dtype"), ABSOLUTE_CASES, ids=[f"{a}-{d[6:]}" for a, d in ABSOLUTE_CASES])
def test_absolute_threshold_standard_at_both_sides_of_rtol_and_atol(api, dtype):
    limits = threshold_table()[api][dtype]
    rtol, small, atol = float(limits["rtol"]), float(limits["small_value"]), float(limits["small_value_atol"])
    device = _exact([1.0, -3.0, 10.0], dtype)  # normal values
    for factor, expected in ((0.95, PASS), (1.05, ERROR)):
        bench = device.astype(np.float64) / (1 + factor * rtol)  # relative error factor * rtol
        assert _verdict(api, bench, device, dtype) == expected, ("relative", factor)
    device = _exact([small / 4, -small / 2], dtype)  # small values
    for factor, expected in ((0.95, PASS), (1.05, ERROR)):
        bench = device.astype(np.float64) - factor * atol  # absolute error factor * atol
        assert np.all(np.abs(bench) < small)
        assert _verdict(api, bench, device, dtype) == expected, ("absolute", factor)


def _ulp(values: np.ndarray, dtype: str) -> np.ndarray:
    return np.exp2(np.floor(np.log2(np.abs(values))) - MANTISSA[dtype])


@pytest.mark.parametrize("dtype", list(DTYPES))
@pytest.mark.parametrize("api", ["matmul", "linear", "addmm"])
def test_ulp_standard_at_both_sides_of_its_thresholds(api, dtype):
    # one binade, so that a benchmark one ULP below a value keeps its exponent (ULPs are the benchmark's)
    device = _exact(np.linspace(1.1, 1.9, 2000).tolist(), dtype)
    exact = device.astype(np.float64)
    if dtype in ("torch.float16", "torch.bfloat16"):
        # one ULP is allowed (an error of exactly one ULP passes); over 1 ULP on 0.1% or more fails
        assert _verdict(api, exact - _ulp(exact, dtype), device, dtype) == PASS
        few = exact.copy()
        few[:1] -= 1.5 * _ulp(exact[:1], dtype)  # 1 of 2000 = 0.05%: under 0.1%
        assert _verdict(api, few, device, dtype) == PASS
        more = exact.copy()
        more[:2] -= 1.5 * _ulp(exact[:2], dtype)  # 2 of 2000 = 0.1%: the docs pass only "less than 0.001"
        assert _verdict(api, more, device, dtype) == ERROR
    else:
        # float32: a mean under 64 ULP passes; 64 or more with over 5% beyond 32 ULP fails
        assert _verdict(api, exact - 63 * _ulp(exact, dtype), device, dtype) == PASS
        assert _verdict(api, exact - 65 * _ulp(exact, dtype), device, dtype) == ERROR
        assert _verdict(api, exact - 1 * _ulp(exact, dtype), device, dtype) == PASS


@pytest.mark.parametrize("api", ["conv1d", "conv2d"])
@pytest.mark.parametrize(("bad", "expected"), [(9, PASS), (11, ERROR)])
def test_thousandth_standard_at_both_sides_of_0_999(api, bad, expected):
    device = _exact([1.0] * 10_000, "torch.float32")
    bench = device.astype(np.float64)
    bench[:bad] = 1.0 / 1.003  # relative error 0.3%: over a thousandth
    # 9991 of 10000 within a thousandth is over 0.999; 9989 is not
    assert _verdict(api, bench, device, "torch.float32") == expected


@pytest.mark.parametrize("dtype", list(DTYPES))
def test_binary_consistency_fails_on_one_differing_element(dtype):
    device = np.arange(8, dtype=np.int64)
    bench = device.astype(np.float64)
    assert _verdict("argmax", bench, device, "torch.int64") == PASS
    bench[3] += 1
    assert _verdict("argmax", bench, device, "torch.int64") == ERROR


@pytest.mark.parametrize(("ratio", "expected"), [(1.9, PASS), (2.1, ERROR)])
def test_benchmark_standard_at_both_sides_of_the_rmse_ratio_limit(ratio, expected):
    """Root mean square error at most twice the other device's: exp is judged by the benchmark standard."""
    device_values = np.linspace(0.5, 2.0, 1000)
    bench = device_values.copy()
    gpu = _exact((bench * (1 + 1e-4)).tolist(), "torch.float32")
    npu = _exact((bench * (1 + ratio * 1e-4)).tolist(), "torch.float32")
    assert _verdict("exp", bench, npu, "torch.float32", gpu_device=gpu) == expected
