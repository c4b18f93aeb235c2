"""Overflow check: which calls to keep, and when to stop looking.

A call overflows when every floating value going in is finite and some
value coming out is inf or nan (on Ascend NPU the hardware's overflow flag
can say so instead). The decision reads the statistics already measured for
the dump, so checking costs nothing extra.
"""

from __future__ import annotations

import math
from typing import Any

NONFINITE_TEXT = ("inf", "-inf", "nan")
STAT_KEYS = ("Max", "Min", "Mean", "Norm")


def is_nonfinite(value: Any) -> bool:
    if isinstance(value, str):
        return value in NONFINITE_TEXT
    if isinstance(value, float):
        return not math.isfinite(value)
    resolve = getattr(value, "resolve", None)  # a statistic still on the device (async dump)
    return is_nonfinite(resolve()) if resolve is not None else False


def has_nonfinite(encoded: Any) -> bool:
    """Whether any tensor summary in an encoded value holds inf or nan."""
    if isinstance(encoded, dict):
        if "dtype" in encoded and isinstance(encoded.get("type"), str):  # a summary, not kwargs with a dtype=
            return any(is_nonfinite(encoded.get(key)) for key in STAT_KEYS)
        return any(has_nonfinite(item) for item in encoded.values())
    if isinstance(encoded, list):
        return any(has_nonfinite(item) for item in encoded)
    value = getattr(encoded, "value", None)  # a summary a backend handed over as JSON text already (RawJSON)
    return has_nonfinite(value()) if callable(value) else False


class InputScreen:
    """What the overflow check saw in a call's inputs before an in-place call changed them."""

    __slots__ = ("nonfinite",)

    def __init__(self, nonfinite: bool):
        self.nonfinite = nonfinite


class OverflowCounter:
    """Counts kept overflows; ``overflow_nums`` of -1 never stops."""

    def __init__(self, limit: int):
        self.limit = limit
        self.count = 0

    @property
    def exhausted(self) -> bool:
        return self.limit != -1 and self.count >= self.limit

    def overflowed(self, inputs_nonfinite: bool, outputs_nonfinite: bool, hardware_flag: bool | None = None) -> bool:
        """Counts and says whether a call overflowed, from what screening found in its inputs and outputs."""
        if self.exhausted or inputs_nonfinite:
            return False
        overflow = hardware_flag if hardware_flag is not None else outputs_nonfinite
        if overflow:
            self.count += 1
        return bool(overflow)
