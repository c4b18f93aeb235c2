"""Where the first inf or nan of one run is made: the rule the flight recorder and ``db trend`` answer by.

The first call, in the order calls ran, whose outputs hold an inf or a nan while everything it was given
(tensors, numbers, a module's parameters) is finite. A mask filled with -inf is given to its consumers, and
every value that flows on from an inf is too, so neither counts: the call named is where one was made.
"""

from __future__ import annotations

from msprobe.core.diagnosis.calls import Call, calls_of
from msprobe.core.dump.reader import Dump


def makes_nonfinite(call: Call) -> bool:
    outputs = call.tensors("outputs")
    return any(not value.finite for value in outputs) and all(value.finite for value in (*call.inputs, *call.params))


def first_nonfinite(dump: Dump) -> Call | None:
    """The first call of the dump that makes an inf or nan from finite inputs; None when none does."""
    return next((call for call in calls_of(dump) if makes_nonfinite(call)), None)


def call_order(dump: Dump) -> dict[str, int]:
    """Each entry's place in the order calls ran (a module's parameter gradients where they arrive)."""
    return {call.name: call.order for call in calls_of(dump)}
