"""Free benchmark, the framework-neutral half: thresholds, preheat, free_benchmark.csv.

The framework re-runs an API with perturbed inputs and hands both outputs
(as float64 numpy arrays) to :class:`FreeBenchmarkJudge`, which measures
the largest relative difference, decides against a per-dtype threshold
(tuned per API by preheating when asked) and appends failing rows to
``dump_path/free_benchmark.csv`` with the reference's columns.
"""

from msprobe.core.free_benchmark.calls import NOT_REPEATABLE, FreeBenchmarkCalls, chosen_perturbation
from msprobe.core.free_benchmark.judge import (
    CSV_COLUMNS,
    DEFAULT_THRESHOLD,
    THRESHOLDS,
    FreeBenchmarkJudge,
    Verdict,
    dtype_key,
    max_relative_difference,
)

__all__ = [
    "CSV_COLUMNS",
    "DEFAULT_THRESHOLD",
    "NOT_REPEATABLE",
    "THRESHOLDS",
    "FreeBenchmarkCalls",
    "FreeBenchmarkJudge",
    "Verdict",
    "chosen_perturbation",
    "dtype_key",
    "max_relative_difference",
]
