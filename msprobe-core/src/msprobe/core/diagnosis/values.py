"""Comparing two recorded values: are they the same to the last bit, and how far apart are they.

Sameness uses everything the dump holds: dtype, shape, the four statistics as written, the md5 or xor
checksum, and in a tensor dump the tensors themselves. The distance is a relative error against the value's
scale: from the tensors when they were saved (the root mean square of the difference over that of the
benchmark), otherwise from the statistics (each statistic's difference over the larger of itself and the
benchmark's root mean square, so a mean near zero does not count noise as a large error). A checksum alone
gives sameness and no distance.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

import numpy as np

from msprobe.core.diagnosis.calls import Value
from msprobe.core.distance import same_number, statistics_distance

ArrayLoader = Callable[[str, Value], "np.ndarray | None"]  # (side, value) -> the saved tensor, or None


# Max and Min are the same number however they are found; a mean and a norm are sums, whose last bits depend on
# the order they were added in: mindstudio-probe and msprobe, or a C kernel and torch, differ there for the very
# same tensor. A relative difference this small in them is that, not another value.
REDUCTION_BITS = 1e-6


def _known_on_both(ours: Value, theirs: Value) -> tuple[tuple, tuple]:
    """The statistics as compared: where one side was merged from partial sums, only those it knows."""
    if not (ours.partly_known or theirs.partly_known):
        return ours.stats, theirs.stats
    keep = [a is not None and b is not None for a, b in zip(ours.stats, theirs.stats)]
    return (
        tuple(a if known else None for a, known in zip(ours.stats, keep)),
        tuple(b if known else None for b, known in zip(theirs.stats, keep)),
    )


def _same_statistics(ours: Value, theirs: Value) -> bool:
    (high, low, mean, norm), (bench_high, bench_low, bench_mean, bench_norm) = _known_on_both(ours, theirs)
    if ours.partly_known or theirs.partly_known:
        rms = abs(bench_norm) / math.sqrt(theirs.size or 1) if bench_norm is not None else 0.0
        close = (
            mean is None or bench_mean is None or abs(mean - bench_mean) <= REDUCTION_BITS * max(abs(bench_mean), rms)
        )
        return same_number(high, bench_high) and same_number(low, bench_low) and close
    if not (same_number(high, bench_high) and same_number(low, bench_low)):
        return False
    if same_number(mean, bench_mean) and same_number(norm, bench_norm):
        return True
    if None in (mean, norm, bench_mean, bench_norm) or not all(
        map(math.isfinite, (mean, norm, bench_mean, bench_norm))
    ):
        return False
    rms = abs(bench_norm) / math.sqrt(theirs.size or 1)
    return abs(mean - bench_mean) <= REDUCTION_BITS * max(abs(bench_mean), rms) and abs(
        norm - bench_norm
    ) <= REDUCTION_BITS * abs(bench_norm)


SCALED = 0.05  # a tensor this far from the benchmark's (relative), all its statistics alike, is scaled
SCALE_SPREAD = 0.2  # ... when its statistics' ratios lie within this share of that distance of each other


def scale_factor(ours: Value, theirs: Value) -> float | None:
    """k, when this run's tensor is k times the benchmark's by every statistic that is not near zero (Max,
    Min, Mean, Norm) and k is at least ``SCALED`` from 1: a gradient scaled by a hook or a loss, which no
    rounding does (rounding moves each statistic its own way, by far less). None otherwise."""
    if ours.stats is None or theirs.stats is None or ours.shape != theirs.shape:
        return None
    numbers = (*ours.stats, *theirs.stats)
    if any(n is None or not math.isfinite(n) for n in numbers):
        return None
    high, low, mean, norm = ours.stats
    bench_high, bench_low, bench_mean, bench_norm = theirs.stats
    if bench_norm == 0:
        return None
    factor = norm / bench_norm
    peak, rms = max(abs(bench_high), abs(bench_low)), bench_norm / math.sqrt(theirs.size or 1)
    ratios = [factor]
    for value, bench, scale in ((high, bench_high, peak), (low, bench_low, peak), (mean, bench_mean, rms)):
        if bench != 0 and abs(bench) >= SCALED * scale:  # a statistic near zero says nothing of a scale
            ratios.append(value / bench)
    distance = abs(factor - 1)
    if len(ratios) < 3 or distance < SCALED:
        return None
    return factor if max(abs(r - factor) for r in ratios) <= SCALE_SPREAD * distance else None


class ValueComparer:
    """Compares this run's values with the benchmark run's, loading saved tensors at most once each."""

    def __init__(self, load: ArrayLoader | None = None):
        self._load = load
        self._arrays: dict[tuple[str, int], Any] = {}

    def array(self, side: str, value: Value) -> np.ndarray | None:
        if self._load is None or not value.data_name:
            return None
        key = (side, id(value))
        if key not in self._arrays:
            try:
                loaded = self._load(side, value)
                self._arrays[key] = None if loaded is None else np.asarray(loaded)
            except Exception:  # an unreadable file is no evidence either way
                self._arrays[key] = None
        return self._arrays[key]

    def same(self, ours: Value, theirs: Value) -> bool:
        if ours.tensor != theirs.tensor:
            return False
        if not ours.tensor:
            return ours.literal == theirs.literal
        if ours.dtype != theirs.dtype or ours.shape != theirs.shape:
            return False
        if ours.checksum is not None and theirs.checksum is not None and ours.checksum != theirs.checksum:
            return False
        if ours.stats is not None and theirs.stats is not None and not _same_statistics(ours, theirs):
            return False
        a, b = self.array("npu", ours), self.array("bench", theirs)
        if a is not None and b is not None:
            return a.shape == b.shape and bool(np.array_equal(a, b, equal_nan=a.dtype.kind in "fc"))
        return True

    def same_content(self, ours: Value, theirs: Value) -> bool:
        """The same values, perhaps in another shape (a view of them): what a backward entry needs. Zeros of
        one shape count as the same in any dtype: the zero gradient recorded for an input that takes none (a
        mask) is written in that input's dtype, which two runs may spell differently."""
        if _zeros(ours) and _zeros(theirs) and ours.shape == theirs.shape:
            return True
        if ours.tensor and theirs.tensor and ours.shape != theirs.shape and ours.size == theirs.size:
            if ours.dtype != theirs.dtype or (ours.checksum is None and ours.stats is None):
                return False
            if ours.checksum != theirs.checksum:
                return False
            if ours.stats is not None and theirs.stats is not None:
                return all(same_number(a, b) for a, b in zip(ours.stats, theirs.stats))
            return True
        return self.same(ours, theirs)

    def error(self, ours: Value, theirs: Value) -> float | None:
        """Relative distance, 0 for the same value; None when the dump holds nothing to measure it by."""
        if self.same(ours, theirs):
            return 0.0
        if not (ours.tensor and theirs.tensor) or ours.shape != theirs.shape:
            return None
        a, b = self.array("npu", ours), self.array("bench", theirs)
        if a is not None and b is not None and a.shape == b.shape and a.size:
            return _array_error(a, b)
        if ours.stats is None or theirs.stats is None:
            return None
        return _statistics_error(ours, theirs)


def _zeros(value: Value) -> bool:
    """A tensor whose statistics say it holds zeros (or False) alone; with no statistics, an xor checksum of
    zero says as much as xor can (it cannot tell zeros from values that cancel)."""
    if not value.tensor:
        return False
    if value.stats is not None:
        return value.stats[0] == 0 and value.stats[1] == 0
    return bool(value.checksum) and set(str(value.checksum)) == {"0"}


def _array_error(a: np.ndarray, b: np.ndarray) -> float:
    a64, b64 = a.astype(np.float64, copy=False), b.astype(np.float64, copy=False)
    if a64.dtype.kind == "c":
        a64, b64 = np.abs(a64), np.abs(b64)
    finite = np.isfinite(a64) & np.isfinite(b64)
    if not finite.all():
        if not np.array_equal(np.isfinite(a64), np.isfinite(b64)):
            return math.inf
        a64, b64 = a64[finite], b64[finite]
        if not a64.size:
            return 0.0
    scale = math.sqrt(float(np.mean(b64 * b64)))
    difference = math.sqrt(float(np.mean((a64 - b64) ** 2)))
    if scale == 0:
        return 0.0 if difference == 0 else math.inf
    return difference / scale


def _statistics_error(ours: Value, theirs: Value) -> float:
    return statistics_distance(ours.stats, theirs.stats, theirs.size or 1) or 0.0
