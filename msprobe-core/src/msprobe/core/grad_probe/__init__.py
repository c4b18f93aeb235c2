"""Grad probe, the framework-neutral half: summaries on disk, and comparing two runs.

A framework measures each watched parameter's gradient at every optimizer
step and hands a :class:`GradRecord` to :class:`GradSummaryWriter`, which
writes ``dump_path/rank{R}/grad_summary_{step}.csv`` and, at levels L1/L2,
the gradient's direction as packed sign bits in
``dump_path/rank{R}/step{step}/{param}.npy``. :class:`GradComparator`
compares two such runs step by step: the share of elements whose direction
agrees, per parameter and weighted over all of them, and names the first
step that went wrong (similarity below 0.97 at the first step, or a drop of
more than 0.03 from one step to the next).
"""

from msprobe.core.grad_probe.collect import (
    GradProbeHooks,
    GradRecord,
    GradSummaryWriter,
    header,
    interval_names,
    wait_for_writers,
)
from msprobe.core.grad_probe.compare import GradComparator, RankComparison
from msprobe.core.grad_probe.measure import measure_array

__all__ = [
    "GradComparator",
    "GradProbeHooks",
    "GradRecord",
    "GradSummaryWriter",
    "RankComparison",
    "header",
    "interval_names",
    "measure_array",
    "wait_for_writers",
]
