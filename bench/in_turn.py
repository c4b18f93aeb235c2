"""Timing a tool's step against a plain twin of the workload, one step of each in turn.

Alternating the two (and which goes first) keeps drifts in machine speed
out of the ratio; the first round is a warm-up.
"""

from __future__ import annotations

import shutil
import statistics
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import numpy as np


def time_in_turn(plain_step: Callable[[], None], tool_step: Callable[[], None], steps: int) -> tuple[float, float]:
    """(median tool step, median plain step) in seconds over ``steps`` rounds after one warm-up round."""
    times: dict[bool, list[float]] = {False: [], True: []}
    for round_number in range(steps + 1):
        for with_tool in (False, True) if round_number % 2 else (True, False):
            start = time.perf_counter()
            (tool_step if with_tool else plain_step)()
            if round_number:
                times[with_tool].append(time.perf_counter() - start)
    return statistics.median(times[True]), statistics.median(times[False])


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


def numpy_save_seconds(arrays: Sequence[Any], scratch: Path) -> float:
    """Time to write ``arrays`` with numpy.save, one file each (the tensor dump's yardstick)."""
    scratch.mkdir(exist_ok=True)
    start = time.perf_counter()
    for index, array in enumerate(arrays):
        np.save(scratch / f"{index}.npy", array)
    elapsed = time.perf_counter() - start
    shutil.rmtree(scratch)
    return elapsed


def report_tensor_dump(extra_seconds: float, numpy_seconds: float) -> None:
    print(
        f"tensor L1: {extra_seconds * 1000:.1f} ms over the plain step; numpy.save of the same bytes: "
        f"{numpy_seconds * 1000:.1f} ms; ratio {extra_seconds / numpy_seconds:.2f} (target <= 1.5)"
    )
