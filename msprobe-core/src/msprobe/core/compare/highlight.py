"""Red and yellow rows: the reference's rules for suspicious outputs.

An API's outputs are judged against its own inputs, so a row is marked
where the error *appears*, not everywhere it has spread to.
"""

from __future__ import annotations

from collections import defaultdict

import numpy as np
import pandas as pd

from msprobe.core.compare.rows import Row

RED, YELLOW = "red", "yellow"


def _numbers(column: pd.Series) -> np.ndarray:
    """A result column as floats; 'N/A' and other text become NaN."""
    return pd.to_numeric(column, errors="coerce").to_numpy(dtype=np.float64)


def _lowest(values: np.ndarray) -> float:
    finite = values[~np.isnan(values)]
    return float(finite.min()) if finite.size else float("nan")


def _highest(values: np.ndarray) -> float:
    finite = values[~np.isnan(values)]
    return float(finite.max()) if finite.size else 0.0


def highlight_rows(mode: str, table: pd.DataFrame, pairs: list[tuple[Row | None, Row | None]]) -> dict[int, str]:
    if mode == "md5" or table.empty:
        return {}
    groups: dict[str, dict[str, list[int]]] = defaultdict(lambda: {"in": [], "out": []})
    for index, (npu_row, bench_row) in enumerate(pairs):
        if npu_row is None or bench_row is None:
            continue
        side = "out" if npu_row.role == "output" else "in"
        groups[npu_row.entry][side].append(index)
    marks: dict[int, str] = {}
    npu_max = _numbers(table["NPU max"])
    npu_min = _numbers(table["NPU min"])
    bench_max = _numbers(table["Bench max"])
    max_diff = np.abs(npu_max - bench_max)
    with np.errstate(divide="ignore", invalid="ignore"):
        max_relative = max_diff / np.maximum(0.01, np.abs(bench_max))
    thousandth = _numbers(table["One Thousandth Err Ratio"]) if mode == "tensor" else None
    cosine = _numbers(table["Cosine"]) if mode == "tensor" else None
    red = np.isinf(npu_max) | np.isinf(npu_min) | (np.nan_to_num(max_diff, nan=0.0) > 1e10)
    for index in np.flatnonzero(red):
        marks[int(index)] = RED
    for members in groups.values():
        inputs, outputs = members["in"], members["out"]
        in_rel = _highest(max_relative[inputs]) if inputs else 0.0
        in_diff = _highest(max_diff[inputs]) if inputs else 0.0
        for index in outputs:
            if index in marks:
                continue
            if mode == "statistics" and max_relative[index] > 0.5:
                marks[index] = RED
            elif mode == "tensor" and inputs and _lowest(thousandth[inputs]) > 0.9 and thousandth[index] < 0.6:
                marks[index] = RED
            elif max_relative[index] > 0.1 and in_rel < 0.01:
                marks[index] = YELLOW
            elif inputs and in_diff > 1 and max_diff[index] > 1 and max_diff[index] > 10 * in_diff:
                marks[index] = YELLOW
            elif mode == "tensor" and inputs and _lowest(thousandth[inputs]) - thousandth[index] > 0.1:
                marks[index] = YELLOW
            elif mode == "tensor" and inputs and _lowest(cosine[inputs]) - cosine[index] > 0.1:
                marks[index] = YELLOW
    return marks


SCALED_TOLERANCE = 0.01


def statistics_suspects(table: pd.DataFrame) -> np.ndarray:
    """Rows whose statistics differ by more than 1% of the tensor's own range.

    The reference's Warning (any statistic off by 50% of itself) fires on
    every near-zero mean of a gradient; measuring each difference against
    the benchmark tensor's range instead keeps the advisor on real changes.
    """
    npu = np.column_stack([_numbers(table[c]) for c in ("NPU max", "NPU min", "NPU mean", "NPU l2norm")])
    bench = np.column_stack([_numbers(table[c]) for c in ("Bench max", "Bench min", "Bench mean", "Bench l2norm")])
    scale = np.maximum(np.nanmax(np.abs(bench[:, :2]), axis=1, initial=0.0), 1e-12)
    with np.errstate(invalid="ignore"):
        scaled = np.abs(npu - bench) / scale[:, None]
        nonfinite_mismatch = np.isfinite(npu) != np.isfinite(bench)
    matched = ~(np.isnan(npu).all(axis=1) | np.isnan(bench).all(axis=1))
    return matched & ((np.nan_to_num(scaled, nan=0.0) > SCALED_TOLERANCE).any(axis=1) | nonfinite_mismatch.any(axis=1))
