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


class LaterScreen:
    """A screen whose answer waits on a device: the sums of a value's tensors, read back with their batch.

    ``sums``: objects whose ``finite()`` reads the batch if it has not been
    read yet, and whose ``written_since()`` tells an in-place write since.
    A finite sum proves its tensor finite; a sum that is not may come from
    inf or nan, or from finite values that overflowed it, so a "maybe" is
    looked into with the tensors themselves.
    """

    __slots__ = ("known", "sums")

    def __init__(self, sums: list[Any], known: bool = False):
        self.sums = sums
        self.known = known  # an inf or nan seen without the device (a plain float)

    @property
    def finite(self) -> bool:
        """Proved finite already, with nothing to wait for."""
        return not self.known and not self.sums

    def maybe_nonfinite(self) -> bool:
        return self.known or not all(item.finite() for item in self.sums)

    def nonfinite_then(self) -> bool:
        """A sum that was not finite, of a tensor written in place since: its values then can no longer be
        looked into, and the sum's word stands."""
        return any(not item.finite() and item.written_since() for item in self.sums)


class InputScreen:
    """What the overflow check saw in a call's inputs before an in-place call changed them (``screen``: the
    answer, or a :class:`LaterScreen` taken before the call and read when its batch is)."""

    __slots__ = ("screen",)

    def __init__(self, screen: bool | LaterScreen):
        self.screen = screen

    @property
    def nonfinite(self) -> bool:
        screen = self.screen
        return screen.maybe_nonfinite() if isinstance(screen, LaterScreen) else bool(screen)


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
