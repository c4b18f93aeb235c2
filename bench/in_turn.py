"""Timing a tool's step against a plain twin of the workload, one step of each in turn.

Alternating the two (and which goes first) keeps drifts in machine speed
out of the ratio; the first round is a warm-up.
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable
from typing import Any


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
