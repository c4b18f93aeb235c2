"""Free benchmark's verdicts: the largest relative difference, per-dtype thresholds, preheat, the CSV."""

from __future__ import annotations

import logging
import math
import os
from collections import defaultdict
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from msprobe.core import spreadsheet
from msprobe.core.dump import float_stats
from msprobe.core.files import make_dir

logger = logging.getLogger(__name__)


CSV_COLUMNS = ["rank", "pert_mode", "stage", "step", "api_name", "max_rel", "dtype", "shape", "output_index"]

# Largest relative difference a sound API shows under a perturbation, by the input's dtype, and the
# magnitude below which values are compared absolutely (relative error is meaningless near zero).
THRESHOLDS = {
    "float16": (2**-8, 2**-10),
    "bfloat16": (2**-6, 2**-8),
    "float32": (2**-12, 2**-20),
    "float64": (2**-30, 2**-50),
}
DEFAULT_THRESHOLD = THRESHOLDS["float32"]


def dtype_key(dtype: object) -> str:
    return str(dtype).rsplit(".", 1)[-1].lower()  # torch.float16, Float16 (MindSpore) -> float16


def max_relative_difference(original: np.ndarray, perturbed: np.ndarray, small: float) -> float:
    """max |p - o| / max(|o|, small); inf where only one side is finite."""
    if original.shape != perturbed.shape:
        return float("inf")
    if original.size == 0:
        return 0.0
    if _kernel_reads(original) and _kernel_reads(perturbed):  # the usual case: one pass in C, the same bits
        found = float_stats.max_relative_of(original, perturbed, small)
        if found is not None:
            return found
    elif _all_finite(original) and _all_finite(perturbed):
        return _finite_max_relative(original, perturbed, small)
    both_nan = np.isnan(original) & np.isnan(perturbed)
    same_inf = np.isinf(original) & (original == perturbed)
    ok = ~(both_nan | same_inf)
    original, perturbed = original[ok], perturbed[ok]
    if original.size == 0:
        return 0.0
    if not (np.isfinite(original).all() and np.isfinite(perturbed).all()):
        return float("inf")
    return _finite_max_relative(original, perturbed, small)


def _kernel_reads(values: np.ndarray) -> bool:
    return float_stats.AVAILABLE and values.dtype == np.float64 and values.flags.c_contiguous


def _all_finite(values: np.ndarray) -> bool:
    """One read of the values, by the C kernel when it takes them (it allocates nothing)."""
    if values.flags.c_contiguous and values.dtype.char in "efd":
        found = float_stats.any_nonfinite_of(values)
        if found is not None:
            return not found
    return bool(np.isfinite(values).all())


def _finite_max_relative(original: np.ndarray, perturbed: np.ndarray, small: float) -> float:
    """The usual case, every value finite: two scratch arrays, every step in place.

    Checking every API of a training step, the comparison is a large share
    of the free benchmark's time; the general way above makes a dozen passes.
    """
    # a 0-d result would be a numpy scalar, which cannot take ``out``
    original, perturbed = np.atleast_1d(original), np.atleast_1d(perturbed)
    difference = np.subtract(perturbed, original, dtype=np.float64)
    np.abs(difference, out=difference)
    scale = np.abs(original, dtype=np.float64)
    np.maximum(scale, small, out=scale)
    np.divide(difference, scale, out=difference)
    return float(difference.max())


@dataclass
class Verdict:
    max_rel: float
    threshold: float
    passed: bool


class FreeBenchmarkJudge:
    """Judges perturbed outputs and writes the failures; one per run."""

    def __init__(self, dump_path: str | Path, pert_mode: str, preheat_steps: int = 0, max_sample: int = 20):
        self.path = Path(dump_path) / "free_benchmark.csv"
        self.pert_mode = pert_mode
        self.preheat_steps = preheat_steps
        self.max_sample = max_sample
        self.samples: dict[str, list[float]] = defaultdict(list)
        self.rows_written = 0
        self.checks = 0  # judged after the preheat
        self.preheat_checks = 0
        self.apis: set[str] = set()  # base names judged after the preheat
        self.worst: dict[str, tuple[float, float, str]] = {}  # base name -> (max_rel, threshold, call) that failed

    def threshold(self, api: str, dtype: str) -> float:
        base = THRESHOLDS.get(dtype, DEFAULT_THRESHOLD)[0]
        seen = self.samples.get(api)
        return max(base, *seen) if seen else base

    def judge(
        self,
        *,
        api: str,
        original: np.ndarray,
        perturbed: np.ndarray,
        dtype: str,
        shape: list,
        step: int,
        rank: int,
        stage: str,
        output_index: int | None,
    ) -> Verdict:
        small = THRESHOLDS.get(dtype, DEFAULT_THRESHOLD)[1]
        max_rel = max_relative_difference(original, perturbed, small)
        base = _base_name(api)
        if step < self.preheat_steps:
            self.preheat_checks += 1
            samples = self.samples[base]
            if len(samples) < self.max_sample and np.isfinite(max_rel):
                samples.append(max_rel)
            return Verdict(max_rel, self.threshold(base, dtype), True)
        threshold = self.threshold(base, dtype)
        passed = max_rel <= threshold
        self.checks += 1
        self.apis.add(base)
        if not passed:
            if base not in self.worst or not max_rel <= self.worst[base][0]:  # NaN counts as the worst
                self.worst[base] = (max_rel, threshold, api)
            self._write(
                [
                    rank,
                    self.pert_mode,
                    stage,
                    step,
                    api,
                    max_rel,
                    dtype,
                    tuple(shape),
                    "" if output_index is None else output_index,
                ]
            )
        return Verdict(max_rel, threshold, passed)

    def _write(self, row: list) -> None:
        make_dir(self.path.parent)
        new = not self.path.exists()
        flags = os.O_WRONLY | os.O_CREAT | os.O_APPEND | getattr(os, "O_NOFOLLOW", 0)
        with os.fdopen(os.open(self.path, flags, 0o640), "a", newline="", encoding="utf-8") as handle:
            writer = spreadsheet.writer(handle)
            if new:
                writer.writerow(CSV_COLUMNS)
            writer.writerow(row)
        self.rows_written += 1

    def verdict(self, stage: str, where: str) -> tuple[int, str]:
        """The run's answer in one line, and its logging level: the failures and the worst of them, or how many
        checks passed, or why none was made."""
        mode = f"free benchmark ({self.pert_mode}, {stage}){where}"
        if self.checks == 0:
            if self.preheat_checks:
                return logging.WARNING, (
                    f"{mode} made {self.preheat_checks} checks, all in the first {self.preheat_steps} "
                    "steps (preheat_step), which learn thresholds and report nothing"
                )
            return logging.WARNING, f"{mode} checked nothing: no selected call had a floating-point input"
        if not self.worst:
            return logging.INFO, (
                f"{mode}: {self.checks} checks of {len(self.apis)} APIs, none moved beyond its threshold; "
                "nothing was written"
            )
        failed = len(self.worst)
        max_rel, threshold, call = max(
            self.worst.values(), key=lambda item: (math.isnan(item[0]), 0.0 if math.isnan(item[0]) else item[0])
        )
        return logging.WARNING, (
            f"{mode}: {self.rows_written} of {self.checks} checks failed, in {failed} of {len(self.apis)} APIs; "
            f"the worst is {call} (max_rel {max_rel:.3g}, threshold {threshold:.3g}); see {self.path}"
        )


def _base_name(api: str) -> str:
    """'Torch.matmul.3.forward' -> 'Torch.matmul': preheating learns per API, not per call."""
    parts = api.split(".")
    return ".".join(parts[:2]) if len(parts) >= 2 else api
