"""Grad probe's statistics of one gradient, from its values as a numpy array."""

from __future__ import annotations

import logging

import numpy as np

from msprobe.core.dump import float_stats
from msprobe.core.grad_probe.collect import GradRecord

logger = logging.getLogger(__name__)


def measure_array(name: str, array: np.ndarray, level: str, bounds: list[float]) -> GradRecord:
    """A GradRecord from a host array: for backends that hand the gradient over as numpy."""
    import hashlib

    flat = np.ascontiguousarray(array).reshape(-1)
    quick = float_stats.stats_of(flat) if flat.dtype in (np.float32, np.float64) and flat.size else None
    if quick is not None:  # one pass in C, the numbers the PyTorch side reports for the same values
        maximum, minimum, _, norm = quick
    else:
        wide = flat.astype(np.float64)
        maximum, minimum, norm = float(wide.max()), float(wide.min()), float(np.linalg.norm(wide))
    record = GradRecord(name, list(np.shape(array)), maximum, minimum, norm)
    if level == "L0":
        record.md5 = hashlib.md5(flat.tobytes()).hexdigest()
        return record
    record.signs = np.packbits(flat > 0)
    if level == "L2":
        values = flat.astype(np.float64)
        edges = np.asarray(bounds, dtype=np.float64)
        counts = np.bincount(np.searchsorted(edges, values, side="left"), minlength=len(edges) + 1)
        record.buckets = (counts / values.size).tolist()
        record.zeros = float(np.mean(values == 0))
    return record
