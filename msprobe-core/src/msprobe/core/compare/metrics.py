"""Tensor-mode metrics on numpy arrays, with the reference's special cases."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

NA = "N/A"


@dataclass
class TensorMetrics:
    cosine: object = NA
    max_abs_err: object = NA
    max_relative_err: object = NA
    one_thousandth: object = NA
    five_thousandths: object = NA
    message: str = ""


def _as_float64(array: np.ndarray) -> np.ndarray:
    if array.dtype == np.bool_ or np.iscomplexobj(array):
        return np.abs(array).astype(np.float64) if np.iscomplexobj(array) else array.astype(np.float64)
    return array.astype(np.float64, copy=False)


def tensor_metrics(actual: np.ndarray | None, expected: np.ndarray | None) -> TensorMetrics:
    """Cosine, MaxAbsErr, MaxRelativeErr and the err-ratio pair for one tensor pair."""
    if actual is None or expected is None:
        return TensorMetrics(message="No bench data matched.")
    if actual.size == 0 or expected.size == 0:
        return TensorMetrics(cosine=None, max_abs_err=None, message="This is empty data, can not compare.")
    if actual.shape != expected.shape:
        return TensorMetrics(cosine="shape unmatched", message="Shape of NPU and bench Tensor do not match. Skipped.")
    a = _as_float64(actual).ravel()
    b = _as_float64(expected).ravel()
    message = ""
    finite_a, finite_b = np.isfinite(a), np.isfinite(b)
    if not (finite_a.all() and finite_b.all()):
        if not np.array_equal(finite_a, finite_b) or not np.array_equal(a[~finite_a], b[~finite_b], equal_nan=True):
            return TensorMetrics(message="The Position of inf or nan in NPU and bench Tensor do not match.")
        a, b = a[finite_a], b[finite_b]
        if a.size == 0:
            return TensorMetrics(
                cosine=1.0, max_abs_err=0.0, max_relative_err=0.0, one_thousandth=1.0, five_thousandths=1.0
            )
    diff = np.abs(a - b)
    max_abs = float(diff.max())
    with np.errstate(divide="ignore", invalid="ignore"):
        relative = np.where(b != 0, diff / np.abs(b), np.where(diff == 0, 0.0, np.inf))
    max_rel = float(relative.max())
    if actual.ndim == 0:
        message = (
            "This is type of 0-d tensor, can not calculate 'Cosine', 'One Thousandth Err Ratio' and "
            "'Five Thousandths Err Ratio'."
        )
        return TensorMetrics(NA, max_abs, max_rel, NA, NA, message)
    norm_a, norm_b = np.linalg.norm(a), np.linalg.norm(b)
    if norm_a == 0 and norm_b == 0:
        cosine: object = 1.0
    elif norm_a == 0 or norm_b == 0:
        cosine = NA
        message = "Cannot compare by Cosine Similarity, All the data is Zero in npu dump data."
    else:
        cosine = float(np.clip(np.dot(a, b) / (norm_a * norm_b), -1.0, 1.0))
    one = float(np.mean(relative <= 0.001))
    five = float(np.mean(relative <= 0.005))
    return TensorMetrics(cosine, max_abs, max_rel, one, five, message)


def accuracy_reached(metrics: TensorMetrics) -> str:
    """The reference's 'Accuracy Reached or Not' rule for tensor mode."""
    cosine, max_abs = metrics.cosine, metrics.max_abs_err
    if cosine == "shape unmatched":
        return "Unmatched"
    if cosine is None or max_abs is None:
        return "None"
    if max_abs == NA or (cosine == NA and "0-d" not in metrics.message and "Zero" not in metrics.message):
        return "No"
    if isinstance(max_abs, float) and max_abs > 1:
        return "No"
    if isinstance(cosine, float):
        if cosine < 0.9 or (cosine < 0.99 and isinstance(max_abs, float) and max_abs > 0.001):
            return "No"
    return "Yes"
