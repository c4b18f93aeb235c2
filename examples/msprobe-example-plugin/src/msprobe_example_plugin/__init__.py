"""An msprobe plugin kept outside the msprobe packages, as a third party would write it.

It shows every hook family a plugin without a framework of its own uses:
compare metrics (tensor and statistics mode), a free-benchmark perturbation,
a task with its config section and its hooks, CLI commands, and a wrapper
around another hook. A framework backend is the one family left out: the
``msprobe-torch`` and ``msprobe-mindspore`` plugins are the examples of that.
"""

from __future__ import annotations

import json
import os
import time
from pathlib import Path
from typing import Any

import click
import numpy as np
from pydantic import BaseModel, Field

from msprobe.core.backend import CompareMetric, Perturbation, Statistics, Task
from msprobe.core.hookspecs import hookimpl

# -- compare metrics --------------------------------------------------------------------------------------


def sign_flip_ratio(actual: np.ndarray, expected: np.ndarray) -> float:
    """Share of elements whose sign differs; NaN when the shapes differ or are empty."""
    actual = np.asarray(actual, dtype=np.float64)
    expected = np.asarray(expected, dtype=np.float64)
    if actual.shape != expected.shape or actual.size == 0:
        return float("nan")
    return float(np.mean(np.sign(actual) != np.sign(expected)))


def mean_shift(npu: Statistics, bench: Statistics) -> float:
    """How far the mean moved, in units of the bench tensor's range (statistics mode: no tensors needed)."""
    spread = bench.max - bench.min
    return abs(npu.mean - bench.mean) / spread if spread else 0.0


@hookimpl
def msprobe_compare_metrics() -> list[CompareMetric]:
    return [
        CompareMetric("SignFlipRatio", sign_flip_ratio, "share of elements whose sign flipped"),
        CompareMetric("MeanShift", mean_shift, "|mean difference| / bench range", modes=("statistics",)),
    ]


# -- a free-benchmark perturbation -------------------------------------------------------------------------


def scale_round_trip(tensor: Any) -> Any:
    """Times 2, then times 0.5: exact in floating point, unless a value lies within a factor 2 of overflow."""
    return (tensor * 2) * 0.5


@hookimpl
def msprobe_free_benchmark_perturbations() -> list[Perturbation]:
    return [Perturbation("scale_round_trip", scale_round_trip, None, "x * 2 * 0.5: only near-overflow values change")]


# -- a task: one heartbeat.json per dumped step, with its wall time ----------------------------------------


class HeartbeatSection(BaseModel):
    """The config section ``heartbeat`` (``{"task": "heartbeat", "heartbeat": {"every": 2}}``)."""

    every: int = Field(default=1, gt=0, description="Write every N-th step.")


class HeartbeatHooks:
    """What the task does between start() and stop(): nothing needs a framework, so only times are taken."""

    def __init__(self, session: Any):
        self.session = session
        self.started = 0.0
        self.seconds = 0.0

    def install(self) -> None:
        self.started = time.perf_counter()

    def remove(self) -> None:
        self.seconds += time.perf_counter() - self.started

    def end_step(self) -> None:
        if self.session.step % self.session.config.section.every == 0:
            folder = self.session.dump_dir
            folder.mkdir(parents=True, exist_ok=True)
            record = {"step": self.session.step, "seconds": round(self.seconds, 6)}
            (folder / "heartbeat.json").write_text(json.dumps(record))
        self.seconds = 0.0


@hookimpl
def msprobe_tasks() -> list[Task]:
    return [Task("heartbeat", "one heartbeat.json per step with its wall time", section=HeartbeatSection)]


@hookimpl
def msprobe_task_hooks(session: Any) -> HeartbeatHooks | None:
    return HeartbeatHooks(session) if session.config.task == "heartbeat" else None


# -- commands -------------------------------------------------------------------------------------------------


@click.command("sign-flips")
@click.argument("actual", type=click.Path(exists=True, dir_okay=False))
@click.argument("expected", type=click.Path(exists=True, dir_okay=False))
def sign_flips_command(actual: str, expected: str) -> None:
    """Print the share of elements whose sign differs between two .npy files."""
    ratio = sign_flip_ratio(np.load(actual, allow_pickle=False), np.load(expected, allow_pickle=False))
    click.echo(f"SignFlipRatio: {ratio:.6f}")


@click.command("heartbeat-summary")
@click.argument("dump_path", type=click.Path(exists=True, file_okay=False, path_type=Path))
def heartbeat_summary_command(dump_path: Path) -> None:
    """Print the steps the heartbeat task wrote under DUMP_PATH and their wall times."""
    for file in sorted(dump_path.glob("step*/rank*/heartbeat.json")):
        record = json.loads(file.read_text())
        click.echo(f"step {record['step']}: {record['seconds']:.6f} s ({file.parent.name})")


@hookimpl
def msprobe_cli_commands() -> list[click.Command]:
    return [sign_flips_command, heartbeat_summary_command]


# -- a wrapper around another hook ---------------------------------------------------------------------------


@hookimpl(wrapper=True, specname="msprobe_compare_metrics")
def hide_metric_columns() -> Any:
    """Leave out the columns named in MSPROBE_HIDE_METRICS (comma-separated), whichever plugin adds them:
    a wrapper receives every plugin's answers and returns what the compare gets."""
    answers = yield
    hidden = {name.strip() for name in os.environ.get("MSPROBE_HIDE_METRICS", "").split(",") if name.strip()}
    return [[metric for metric in answer if metric.name not in hidden] for answer in answers]
