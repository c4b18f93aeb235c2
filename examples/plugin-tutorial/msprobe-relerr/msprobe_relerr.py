"""Compare columns: the relative L2 error of two tensors, and the ratio of their norms in statistics mode."""

import numpy as np

from msprobe.core.backend import CompareMetric, Statistics
from msprobe.core.hookspecs import hookimpl


def relative_l2_error(actual: np.ndarray, expected: np.ndarray) -> float:
    """||actual - expected|| / ||expected||, in float64; NaN when the shapes differ or expected is zero."""
    actual = np.asarray(actual, dtype=np.float64)
    expected = np.asarray(expected, dtype=np.float64)
    if actual.shape != expected.shape:
        return float("nan")
    scale = np.linalg.norm(expected)
    return float(np.linalg.norm(actual - expected) / scale) if scale else float("nan")


def norm_ratio(npu: Statistics, bench: Statistics) -> float:
    """NPU norm over bench norm; a dump without norms raises here, and the cell shows N/A."""
    return npu.norm / bench.norm


@hookimpl
def msprobe_compare_metrics() -> list[CompareMetric]:
    return [
        CompareMetric("RelL2Err", relative_l2_error, "||a - b|| / ||b||"),
        CompareMetric("NormRatio", norm_ratio, "NPU norm / bench norm", modes=("statistics",)),
    ]
