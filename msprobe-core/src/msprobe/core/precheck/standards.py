"""Which precision standard judges an API, and its thresholds (the reference's two YAML tables)."""

from __future__ import annotations

import functools
import importlib.resources
from typing import Any

import yaml

BENCHMARK = "BenchmarkStandard"  # the default: compare with the high-precision benchmark
ABSOLUTE = "AbsoluteThreshStandard"
BINARY = "BinaryCompareStandard"
ULP = "ULPStandard"
THOUSANDTH = "ThousandthStandard"
ACCUMULATIVE = "AccumulativeErrorStandard"

ALGORITHM_NAMES = {
    BENCHMARK: "标杆比对法",
    ABSOLUTE: "绝对阈值法",
    BINARY: "二进制一致法",
    ULP: "ULP误差比对法",
    THOUSANDTH: "双千指标法",
    ACCUMULATIVE: "累积误差比对法",
}

SMALL_VALUE = {"torch.float32": 2**-20, "torch.float16": 2**-10, "torch.bfloat16": 2**-10, "torch.float64": 2**-30}
SMALL_VALUE_ATOL = {"torch.float32": 2**-30, "torch.float16": 2**-16, "torch.bfloat16": 2**-16, "torch.float64": 2**-50}


def _load(name: str) -> Any:
    return yaml.safe_load(importlib.resources.files("msprobe.core.data").joinpath(name).read_text())


@functools.cache
def standard_table() -> dict[str, str]:
    """API name (without namespace) -> standard."""
    table: dict[str, str] = {}
    for standard, names in (_load("api_precision_standard.yaml") or {}).items():
        for name in names or ():
            table[str(name)] = standard
    return table


@functools.cache
def threshold_table() -> dict[str, dict[str, dict[str, float]]]:
    return _load("api_precision_threshold.yaml") or {}


def standard_for(api: str) -> str:
    """``Functional.conv2d`` or ``conv2d`` -> the standard that judges it."""
    return standard_table().get(api.rsplit(".", maxsplit=1)[-1], BENCHMARK)


def absolute_thresholds(api: str, dtype: str) -> tuple[float, float, float]:
    """(rtol, small_value, small_value_atol) of the absolute-threshold standard."""
    entry = threshold_table().get(api.rsplit(".", maxsplit=1)[-1], {}).get(dtype)
    if entry:
        return float(entry["rtol"]), float(entry["small_value"]), float(entry["small_value_atol"])
    return 1e-6 if dtype == "torch.float32" else 1e-3, SMALL_VALUE.get(dtype, 2**-20), SMALL_VALUE_ATOL.get(dtype, 1e-9)
