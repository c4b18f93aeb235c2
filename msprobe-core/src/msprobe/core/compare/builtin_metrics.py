"""The built-in plugin ``builtin-metrics``: the reference's compare columns, as metrics like any plugin's.

Tensor mode: Cosine, MaxAbsErr, MaxRelativeErr and the two error ratios, all
five from one computation per pair. Statistics mode: the difference and the
relative error of each of Max, Min, Mean and Norm.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

from msprobe.core.backend import CompareMetric, Statistics
from msprobe.core.compare.metrics import pair_metrics, statistic_cells, statistic_columns
from msprobe.core.hookspecs import hookimpl


def _tensor_column(attribute: str) -> Callable[[np.ndarray, np.ndarray], Any]:
    def column(actual: np.ndarray, expected: np.ndarray) -> Any:
        return getattr(pair_metrics(actual, expected), attribute)

    return column


def _statistics_column(field: str, relative: bool) -> Callable[[Statistics, Statistics], Any]:
    def column(npu: Statistics, bench: Statistics) -> Any:
        diff, relative_error, _warn = statistic_cells(getattr(npu, field), getattr(bench, field))
        return relative_error if relative else diff

    return column


TENSOR_METRICS = (
    CompareMetric("Cosine", _tensor_column("cosine"), "cosine similarity of the flattened tensors"),
    CompareMetric("MaxAbsErr", _tensor_column("max_abs_err"), "largest absolute difference"),
    CompareMetric("MaxRelativeErr", _tensor_column("max_relative_err"), "largest relative difference"),
    CompareMetric(
        "One Thousandth Err Ratio", _tensor_column("one_thousandth"), "share of elements within 0.001 relative"
    ),
    CompareMetric(
        "Five Thousandths Err Ratio", _tensor_column("five_thousandths"), "share of elements within 0.005 relative"
    ),
)
_STATISTICS = (("max", "Max", "MaxRelativeErr"), ("min", "Min", "MinRelativeErr"), ("mean", "Mean", "MeanRelativeErr"),
               ("norm", "L2norm", "NormRelativeErr"))  # fmt: skip
STATISTICS_METRICS = tuple(
    CompareMetric(
        f"{label} diff", _statistics_column(field, False), f"NPU {field} minus bench {field}", ("statistics",)
    )
    for field, label, _ in _STATISTICS
) + tuple(
    CompareMetric(name, _statistics_column(field, True), f"|{field} difference / bench {field}|, in %", ("statistics",))
    for field, _, name in _STATISTICS
)
BUILTIN_METRICS = TENSOR_METRICS + STATISTICS_METRICS


def statistics_columns(npu_stats: list[tuple], bench_stats: list[tuple]) -> tuple[dict[str, list[Any]], np.ndarray]:
    """The eight built-in statistics columns of the matched pairs, by column name, and each pair's warning
    (any statistic off by more than half of the larger value), as their metrics would give them row by row."""
    cells: dict[str, list[Any]] = {}
    warn = np.zeros(len(npu_stats), dtype=bool)
    npu_columns, bench_columns = list(zip(*npu_stats)) or [()] * 4, list(zip(*bench_stats)) or [()] * 4
    for position, (_field, label, relative_name) in enumerate(_STATISTICS):
        diffs, relatives, warned = statistic_columns(list(npu_columns[position]), list(bench_columns[position]))
        cells[f"{label} diff"], cells[relative_name] = diffs, relatives
        warn |= warned
    return cells, warn


@hookimpl
def msprobe_compare_metrics() -> list[CompareMetric]:
    return list(BUILTIN_METRICS)
