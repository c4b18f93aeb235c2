"""Timing a tool's step against a plain twin of the workload, one step of each in turn.

Alternating the variants (and which goes first) keeps drifts in machine
speed out of the ratio; the first round is a warm-up.
"""

from __future__ import annotations

import argparse
import itertools
import shutil
import statistics
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, NamedTuple

import numpy as np


class Timing(NamedTuple):
    """Median step times in seconds; ``yardstick`` is None when none was timed.

    ``ratios``: tool step / plain step of each round (the two ran next to
    each other), whose median and quartiles are reported: a drift in machine
    speed between rounds leaves them alone.
    """

    tool: float
    plain: float
    yardstick: float | None = None
    ratios: tuple[float, ...] = ()

    @property
    def ratio(self) -> float:
        return statistics.median(self.ratios) if self.ratios else self.tool / self.plain

    def spread(self) -> tuple[float, float]:
        """The middle half of the rounds' ratios (first and third quartile)."""
        if len(self.ratios) < 4:
            return min(self.ratios, default=self.ratio), max(self.ratios, default=self.ratio)
        quartiles = statistics.quantiles(self.ratios, n=4)
        return quartiles[0], quartiles[2]


def time_in_turn(
    plain_step: Callable[[], None],
    tool_step: Callable[[], None],
    steps: int,
    yardstick: Callable[[], None] | None = None,
    between: Callable[[], None] | None = None,
) -> Timing:
    """Medians over ``steps`` rounds after one warm-up round; the tool's step comes first in the warm-up.

    ``between`` runs after every step, outside the timing: ``os.sync`` for the tensor dump and its
    yardstick, so that neither writes its files while the kernel writes back an earlier step's.
    """
    variants = [("tool", tool_step), ("plain", plain_step)] + ([("yardstick", yardstick)] if yardstick else [])
    times: dict[str, list[float]] = {name: [] for name, _ in variants}
    for round_number in range(steps + 1):
        shift = round_number % len(variants)
        for name, step in variants[shift:] + variants[:shift]:
            start = time.perf_counter()
            step()
            if round_number:
                times[name].append(time.perf_counter() - start)
            if between is not None:
                between()
    medians = {name: statistics.median(values) for name, values in times.items()}
    ratios = tuple(tool / plain for tool, plain in zip(times["tool"], times["plain"]))
    return Timing(medians["tool"], medians["plain"], medians.get("yardstick"), ratios)


def dumped_step(debugger: Any, train_step: Callable[[], None]) -> Callable[[], None]:
    """One training step between the debugger's start() and stop()/step(); a plain step without one."""

    def step() -> None:
        if debugger is not None:
            debugger.start()
        train_step()
        if debugger is not None:
            debugger.stop()
            debugger.step()

    return step


def numpy_twin(
    plain_step: Callable[[], None], load_arrays: Callable[[], Sequence[Any]], scratch: Path
) -> Callable[[], None]:
    """The tensor dump's yardstick: a plain step, then numpy.save of the arrays the dump wrote, one file each.

    Timed in turn with the dumped step, so both meet the same file system:
    on the machine we measure on, creating the same 840 files takes from
    0.2 s to 1.4 s depending on what was written before. ``load_arrays``
    runs at the first call (the warm-up, after the dump's first step).
    """
    arrays: list[Any] = []
    rounds = itertools.count()

    def step() -> None:
        if not arrays:
            arrays.extend(load_arrays())
        plain_step()
        folder = scratch / f"round{next(rounds)}"
        folder.mkdir(parents=True)
        for index, array in enumerate(arrays):
            np.save(folder / f"{index}.npy", array)

    return step


def report_tensor_dump(timing: Timing, scratch: Path) -> None:
    extra, numpy_extra = timing.tool - timing.plain, timing.yardstick - timing.plain
    print(
        f"tensor L1: {extra * 1000:.1f} ms over the plain step; numpy.save of the same arrays, in turn: "
        f"{numpy_extra * 1000:.1f} ms; ratio {extra / numpy_extra:.2f} (target <= 1.5)"
    )
    shutil.rmtree(scratch, ignore_errors=True)


def print_ratios(
    timings: dict[str, Timing], targets: dict[str, float], columns: dict[str, dict[str, str]] | None = None
) -> None:
    """Median step times, and the median of the rounds' ratios with its middle half (the verdict's basis).

    ``columns``: more columns, by heading, each a value per configuration (host reads/step, say).
    """
    columns = columns or {}
    extra = "".join(f" {heading:>16}" for heading in columns)
    width = max([18, *map(len, timings)])
    heading = f"{'step (ms)':>10} {'plain (ms)':>10} {'ratio':>8} {'middle half':>15}"
    print(f"{'configuration':<{width}} {heading}{extra}  target")
    for label, timing in timings.items():
        ratio = timing.ratio
        low, high = timing.spread()
        target = targets.get(label)
        verdict = "" if target is None else f"<= {target}x  {'met' if ratio <= target else 'NOT met'}"
        cells = "".join(f" {values.get(label, '-'):>16}" for values in columns.values())
        print(
            f"{label:<{width}} {timing.tool * 1000:>10.1f} {timing.plain * 1000:>10.1f} {ratio:>7.3f}x "
            f"{f'{low:.2f}-{high:.2f}x':>15}{cells}  {verdict}"
        )


def add_only_option(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--only", default="", help="comma-separated configurations to run, e.g. 'statistics L1,statistics mix'"
    )


def chosen(parser: argparse.ArgumentParser, only: str, configs: Sequence[tuple[str, Any]]) -> list[tuple[str, Any]]:
    """The configurations ``--only`` names, with the untouched one ("none") always first; all when it names none."""
    wanted = {label.strip() for label in only.split(",") if label.strip()}
    unknown = wanted - {label for label, _ in configs}
    if unknown:
        parser.error(f"--only: no configuration named {', '.join(sorted(unknown))}")
    return [(label, config) for label, config in configs if not wanted or label in wanted or label == "none"]
