"""Red and yellow rows, and their messages in Err_message: the reference's rules, as it applies them.

Any row whose NPU max or min is inf or nan, or whose max difference passes
1e10, is red. An API's outputs are then judged against each of its own
inputs, so a row is marked where the error *appears*, not everywhere it has
spread to; a message is added once per input that triggers it, as the
reference adds it.
"""

from __future__ import annotations

import math
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import numpy as np
import pandas as pd

from msprobe.core.compare.rows import Row

RED, YELLOW = "red", "yellow"


def _numbers(column: pd.Series) -> np.ndarray:
    """A result column as floats; 'N/A' and other text become NaN."""
    values = column.tolist()
    if set(map(type, values)) <= {float, int}:  # the common case, without pandas' conversion
        return np.array(values, dtype=np.float64)
    return pd.to_numeric(column, errors="coerce").to_numpy(dtype=np.float64)


def _numeric(value: Any) -> bool:
    """A number the rules may use: bools count, as in the reference; inf and nan do not (it writes them as text)."""
    return isinstance(value, (int, float, np.integer, np.floating)) and math.isfinite(value)


# the reference's messages, word for word: users search for them
OVERFLOW = "maximum or minimum is nan, -inf, or inf"
HUGE_ERROR = "maximum absolute error exceeds 1e+10"
ORDER_OF_MAGNITUDE = (
    "maximum absolute error of both input/parameters and output exceed 1, "
    "with the output larger by an order of magnitude"
)
RELATIVE_RED = "maximum relative error exceeds 0.5"
RELATIVE_YELLOW = "The output's maximum relative error exceeds 0.1, while the input/parameters's is below 0.01"
THOUSANDTH_RED = "The input/parameters's one thousandth err ratio exceeds 0.9, while the output's is below 0.6"
THOUSANDTH_YELLOW = (
    "The output's one thousandth err ratio decreases by more than 0.1 compared to the input/parameters's"
)
COSINE_YELLOW = "The output's cosine decreases by more than 0.1 compared to the input/parameters's"
FLOAT64_EPS = float(np.finfo(float).eps)


@dataclass
class Highlights:
    """Row index -> "red" | "yellow", and each marked row's messages in the order the rules found them."""

    marks: dict[int, str]
    messages: dict[int, list[str]]


def _batches(pairs: list[tuple[Row | None, Row | None]]) -> Iterator[tuple[range, range]]:
    """Each call's rows as the reference splits them: its first row and every input or parameter row up to
    the last of them count as inputs, the output rows after that as outputs. (A module's parameters follow its
    outputs, so its outputs are then judged as inputs, as the reference does.)"""
    sides = [npu if npu is not None else bench for npu, bench in pairs]
    entries = ["" if row is None else row.entry for row in sides]
    roles = ["" if row is None else row.role for row in sides]
    index, count = 0, len(pairs)
    while index < count:
        entry = entries[index]
        start, inputs_end, outputs_end = index, index + 1, index + 1
        index += 1
        while index < count and entries[index] == entry:
            role = roles[index]
            if role in ("input", "parameters"):
                inputs_end, outputs_end = inputs_end + 1, outputs_end + 1
            elif role == "output":
                outputs_end += 1
            index += 1
        yield range(start, inputs_end), range(inputs_end, outputs_end)


def _kinds(values: list[Any]) -> tuple[list[bool], list[bool]]:
    """Which values the rules may use as numbers (finite; bools count), and which are inf or nan."""
    if set(map(type, values)) <= {float}:  # the common case, in numpy
        finite = np.isfinite(np.array(values, dtype=np.float64))
        return finite.tolist(), (~finite).tolist()
    numeric = [
        (type(v) is float and v - v == 0)
        or type(v) is int
        or type(v) is bool
        or (_numeric(v) if type(v) is not str else False)
        for v in values
    ]
    nonfinite = [(type(v) is float and v - v != 0) or (type(v) is not float and _nonfinite(v)) for v in values]
    return numeric, nonfinite


def highlight_rows(mode: str, table: pd.DataFrame, pairs: list[tuple[Row | None, Row | None]]) -> Highlights:
    """The reference's rules: inf/nan and huge errors on any row; an output against each input of its call."""
    if mode == "md5" or table.empty:
        return Highlights({}, {})
    diff_column = "MaxAbsErr" if mode == "tensor" else "Max diff"
    npu_max, npu_min = table["NPU max"].tolist(), table["NPU min"].tolist()
    bench_max, max_diff = table["Bench max"].tolist(), table[diff_column].tolist()
    thousandth = table["One Thousandth Err Ratio"].tolist() if mode == "tensor" else None
    cosine = table["Cosine"].tolist() if mode == "tensor" else None
    red: dict[int, list[str]] = {}
    yellow: dict[int, list[str]] = {}
    max_numeric, max_nonfinite = _kinds(npu_max)
    _, min_nonfinite = _kinds(npu_min)
    bench_numeric, _ = _kinds(bench_max)
    diff_numeric, _ = _kinds(max_diff)
    trio = [a and b and c for a, b, c in zip(max_numeric, bench_numeric, diff_numeric)]

    for index in range(len(pairs)):
        if max_nonfinite[index] or min_nonfinite[index]:
            red.setdefault(index, []).append(OVERFLOW)
        elif diff_numeric[index] and abs(max_diff[index]) > 1e10:
            red.setdefault(index, []).append(HUGE_ERROR)
    for inputs, outputs in _batches(pairs):
        for out in outputs:
            if not trio[out]:  # the reference's "already red" test never matches: it goes on too
                continue
            for inp in inputs:
                if not trio[inp]:
                    continue
                _order_of_magnitude(max_diff[inp], max_diff[out], out, yellow)
                if mode == "statistics":
                    in_rel = abs(max_diff[inp] / max(FLOAT64_EPS, bench_max[inp]))
                    out_rel = abs(max_diff[out] / max(FLOAT64_EPS, bench_max[out]))
                    if out_rel > 0.5:
                        red.setdefault(out, []).append(RELATIVE_RED)
                    elif out_rel > 0.1 and in_rel < 0.01:
                        yellow.setdefault(out, []).append(RELATIVE_YELLOW)
                    continue
                if _numeric(thousandth[inp]) and _numeric(thousandth[out]):
                    if thousandth[inp] > 0.9 and thousandth[out] < 0.6:
                        red.setdefault(out, []).append(THOUSANDTH_RED)
                    elif thousandth[inp] - thousandth[out] > 0.1:
                        yellow.setdefault(out, []).append(THOUSANDTH_YELLOW)
                if _numeric(cosine[inp]) and _numeric(cosine[out]) and cosine[inp] - cosine[out] > 0.1:
                    yellow.setdefault(out, []).append(COSINE_YELLOW)
    marks = {index: RED for index in red}
    marks.update({index: YELLOW for index in yellow if index not in red})
    messages = {index: list(found) for index, found in red.items()}
    for index, found in yellow.items():
        if index not in red:
            messages[index] = list(found)
    return Highlights(marks, messages)


def _nonfinite(value: Any) -> bool:
    return isinstance(value, (float, np.floating)) and not math.isfinite(value)


def _order_of_magnitude(in_diff: float, out_diff: float, out: int, yellow: dict[int, list[str]]) -> None:
    if abs(in_diff) > abs(out_diff):
        return
    in_order = 0 if abs(in_diff) < 1 else math.log10(abs(in_diff))
    out_order = 0 if abs(out_diff) < 1 else math.log10(abs(out_diff))
    if out_order - in_order >= 1:
        yellow.setdefault(out, []).append(ORDER_OF_MAGNITUDE)


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


def failing_rows(mode: str, table: pd.DataFrame) -> np.ndarray:
    """Which rows of a compare table count as failing: tensor accuracy 'No', md5 'Different', or the
    scale-aware statistics rule."""
    if mode == "tensor":
        return (table["Accuracy Reached or Not"] == "No").to_numpy()
    if mode == "md5":
        return (table["Result"] == "Different").to_numpy()
    return statistics_suspects(table)
