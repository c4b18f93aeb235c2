"""Tensor-mode metrics on numpy arrays, with the reference's rules and special cases.

The reference's results are what users compare against, so its choices are
kept: a zero in the bench tensor gets float64's epsilon added on both sides
before the relative error is taken (a finite, huge error rather than inf),
positions where both sides hold inf or nan are set to 0 before measuring,
the err ratios count errors strictly below the threshold, values are
rounded to 12 decimals (a cosine above 0.9999 to 6), and 0-d tensors get
no cosine or err ratios.
"""

from __future__ import annotations

import math
import threading
from dataclasses import dataclass
from typing import Any

import numpy as np

from msprobe.core.floattext import float_texts

NA = "N/A"
NAN = "Nan"
UNSUPPORTED = "unsupported"
SHAPE_UNMATCHED = "shape unmatched"
FLOAT64_EPS = float(np.finfo(float).eps)
_FLOAT_KINDS = (np.float16, np.float32, np.float64, np.longdouble)


@dataclass
class TensorMetrics:
    cosine: object = NA
    max_abs_err: object = NA
    max_relative_err: object = NA
    one_thousandth: object = NA
    five_thousandths: object = NA
    message: str = ""


def _rounded(value: float) -> float:
    return float(f"{value:.12f}")


def _all(value: object, message: str) -> TensorMetrics:
    return TensorMetrics(value, value, value, value, value, message)


def _zero_matching_nonfinite(a: np.ndarray, b: np.ndarray) -> bool:
    """Positions where both hold inf (or both nan) are set to 0 in place; False when the positions differ."""
    a_float, b_float = a.astype(float), b.astype(float)
    a_inf, b_inf, a_nan, b_nan = np.isinf(a_float), np.isinf(b_float), np.isnan(a_float), np.isnan(b_float)
    if not (a_inf.any() or a_nan.any() or b_inf.any() or b_nan.any()):
        return True
    if not (np.array_equal(a_inf, b_inf) and np.array_equal(a_nan, b_nan)):
        return False
    for array, mask in ((a, a_inf), (b, b_inf), (a, a_nan), (b, b_nan)):
        array[mask] = 0
    return True


def _relative_errors(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """|a - b| / |b| in the arrays' own float type; where b is 0 both sides get float64's epsilon added."""
    with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
        if b.dtype.type not in _FLOAT_KINDS:
            a, b = a.astype(float), b.astype(float)
        a, b = a.copy(), b.copy()
        zeros = b == 0
        b[zeros] += FLOAT64_EPS
        a[zeros] += FLOAT64_EPS
        return np.abs(np.divide(a - b, b))


def _cosine(a: np.ndarray, b: np.ndarray) -> tuple[object, str]:
    if not a.shape:
        return UNSUPPORTED, ""
    if len(a) == 1:
        return UNSUPPORTED, "This is a 1-d tensor of length 1."
    with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
        dot, a_norm, b_norm = a.dot(b), np.linalg.norm(a), np.linalg.norm(b)
        if a_norm <= FLOAT64_EPS and b_norm <= FLOAT64_EPS:
            return 1.0, ""
        if a_norm <= FLOAT64_EPS:
            return NAN, "Cannot compare by Cosine Similarity, All the data is Zero in npu dump data."
        if b_norm <= FLOAT64_EPS:
            return NAN, "Cannot compare by Cosine Similarity, All the data is Zero in Bench dump data."
        cosine = dot / (a_norm * b_norm)
    if np.isnan(cosine):
        return NAN, "Cannot compare by Cosine Similarity, the dump data has NaN."
    value = _rounded(cosine)
    return (round(value, 6) if value > 0.9999 else value), ""


def _max_or_nan(values: np.ndarray, what: str) -> tuple[object, str]:
    with np.errstate(invalid="ignore"):
        largest = np.max(np.abs(values))
    if np.isnan(largest):
        return NAN, f"Cannot compare by {what}, the data contains nan/inf/-inf in dump data."
    return _rounded(largest), ""


def _ratio(relative: np.ndarray, a: np.ndarray, threshold: float) -> object:
    if not a.shape:
        return UNSUPPORTED
    if not np.size(relative):
        return NAN
    return _rounded(np.sum(relative < threshold) / np.size(relative))


def tensor_metrics(actual: np.ndarray | None, expected: np.ndarray | None) -> TensorMetrics:
    """Cosine, MaxAbsErr, MaxRelativeErr and the err-ratio pair for one tensor pair, with the message."""
    if actual is None or expected is None:
        return _all(UNSUPPORTED, "No bench data matched.")
    if actual.size == 0:
        return _all(0, "This is empty data, can not compare.")
    message = ""
    if not actual.shape:
        message = (
            "This is type of 0-d tensor, can not calculate 'Cosine', 'One Thousandth Err Ratio' and "
            "'Five Thousandths Err Ratio'. "
        )
    elif actual.shape != expected.shape:
        return _all(SHAPE_UNMATCHED, "Shape of NPU and bench tensor do not match. Skipped.")
    if message == "":
        actual, expected = np.array(actual), np.array(expected)  # writable copies: nonfinite positions become 0
        if not _zero_matching_nonfinite(actual, expected):
            return _all(NA, "The position of inf or nan in NPU and bench Tensor do not match.")
        if actual.dtype != expected.dtype:
            message = "Dtype of NPU and bench tensor do not match."
    relative = _relative_errors(actual, expected)
    if actual.shape:
        a, b = actual.reshape(-1).astype(float), expected.reshape(-1).astype(float)
    else:
        a, b = (actual.astype(float), expected.astype(float)) if actual.dtype == np.bool_ else (actual, expected)
    cosine, note = _cosine(a, b)
    with np.errstate(invalid="ignore", over="ignore"):
        max_abs, abs_note = _max_or_nan(a - b, "MaxAbsError")
    max_rel, rel_note = _max_or_nan(relative, "MaxRelativeError")
    metrics = TensorMetrics(cosine, max_abs, max_rel, _ratio(relative, a, 0.001), _ratio(relative, a, 0.005))
    metrics.message = message + note + abs_note + rel_note
    return metrics


def accuracy_reached(metrics: TensorMetrics) -> str:
    """The reference's 'Accuracy Reached or Not': No below cosine 0.99 with an error over 0.001, or below
    cosine 0.9, or with an error over 1; "None" where the cosine or error is not a number."""
    cosine, max_abs = metrics.cosine, metrics.max_abs_err
    if cosine == SHAPE_UNMATCHED:
        return "Unmatched"
    if "None" in (cosine, max_abs):
        return "None"
    if NA in (cosine, max_abs):
        return "No"
    try:
        cosine, max_abs = float(cosine), float(max_abs)  # "Nan" reads as nan, which no threshold catches
    except (TypeError, ValueError):
        return "None"
    if cosine < 0.99 and max_abs > 0.001:
        return "No"
    if cosine < 0.9 or max_abs > 1:
        return "No"
    return "Yes"


def statistic_cells(npu_value: Any, bench_value: Any) -> tuple[Any, Any, bool]:
    """(difference, relative error, warning) of one statistic, by the reference's rule: both must be numbers;
    warn when they differ by more than half of the larger."""
    if not all(isinstance(v, (int, float)) and not isinstance(v, bool) for v in (npu_value, bench_value)):
        return NA, NA, False
    diff = npu_value - bench_value
    if math.isnan(diff):
        return NAN, NAN, False
    relative = f"{abs((diff / bench_value) * 100)}%" if bench_value != 0 else NA
    magnitude = abs(diff) / (max(abs(npu_value), abs(bench_value)) + 1e-10)
    return diff, relative, magnitude > 0.5


def statistic_columns(npu_values: list[Any], bench_values: list[Any]) -> tuple[list[Any], list[Any], np.ndarray]:
    """:func:`statistic_cells` for a whole column of matched pairs at once: the differences, the relative
    errors and the warnings. Pairs of two floats are computed with numpy (the same IEEE operations, so the same
    values); any other pair (ints, text, None) goes through :func:`statistic_cells` itself."""
    count = len(npu_values)
    if set(map(type, npu_values)) | set(map(type, bench_values)) <= {float}:  # the common case, checked in C
        both_float = np.ones(count, dtype=bool)
        a, b = np.array(npu_values, dtype=np.float64), np.array(bench_values, dtype=np.float64)
    else:
        both_float = np.fromiter(
            (type(a) is float and type(b) is float for a, b in zip(npu_values, bench_values)), dtype=bool, count=count
        )
        a = np.array([v if f else 0.0 for v, f in zip(npu_values, both_float.tolist())], dtype=np.float64)
        b = np.array([v if f else 0.0 for v, f in zip(bench_values, both_float.tolist())], dtype=np.float64)
    with np.errstate(all="ignore"):
        diff = a - b
        nan_diff = np.isnan(diff)
        relative = np.abs((diff / np.where(b == 0, 1.0, b)) * 100)
        warn = np.abs(diff) / (np.maximum(np.abs(a), np.abs(b)) + 1e-10) > 0.5
    warn &= both_float & ~nan_diff
    diffs: list[Any] = diff.tolist()
    relatives: list[Any] = float_texts(relative.tolist(), "%")
    for index in np.flatnonzero(nan_diff | (b == 0) | ~both_float).tolist():
        if both_float[index]:
            diffs[index], relatives[index] = (NAN, NAN) if nan_diff[index] else (diffs[index], NA)
            continue
        diffs[index], relatives[index], warn[index] = statistic_cells(npu_values[index], bench_values[index])
    return diffs, relatives, warn


class _LastPair(threading.local):
    """The metrics of the pair seen last, per thread: the five reference columns are five metrics, computed
    once per pair."""

    key: tuple[Any, Any] | None = None
    metrics = TensorMetrics()

    def __call__(self, actual: np.ndarray, expected: np.ndarray) -> TensorMetrics:
        if self.key is None or self.key[0] is not actual or self.key[1] is not expected:
            self.metrics = tensor_metrics(actual, expected)
            self.key = (actual, expected)  # held, so the identities cannot be reused by other arrays
        return self.metrics

    def forget(self) -> None:
        self.key = None


pair_metrics = _LastPair()
