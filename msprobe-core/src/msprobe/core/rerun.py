"""Transient or persistent: a step whose loss went wrong is run again from the state saved at its start, and the
two executions' calls are compared, framework-free.

A backend records each call of a step as a :class:`Call` (its name, the module it ran in, an exact checksum of
its outputs, whether they hold inf or nan). When the rule fires on a step (its loss non-finite, or out of its
series as the monitor's anomaly rule says), the step is run again from the same weights, optimizer state, random
state and batch:

- the same calls with the same checksums: the fault is **persistent** (the code or the data), and the first
  call that made an inf or nan (or, for a spike, the step's last call) is named;
- another result: the fault is **transient** (suspect the hardware), and the first call whose result differs
  between the two executions is named.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

from msprobe.core.monitor.anomaly import turbulent

PERSISTENT = "persistent"
TRANSIENT = "transient"


@dataclass(frozen=True)
class Call:
    index: int
    name: str  # the operator, e.g. aten.mm.default
    module: str  # the module path it ran in ("" outside every module; "backward" in the backward)
    checksum: int  # exact: any changed bit of an output changes it
    nonfinite: bool
    occurrence: int = 0  # how many calls of the same operator came before it in the step

    def where(self) -> str:
        place = (
            f"module {self.module}"
            if self.module and self.module != "backward"
            else ("the backward" if self.module == "backward" else "outside every module")
        )
        return f"call {self.index} {self.name} #{self.occurrence} ({place})"


@dataclass
class LossRule:
    """When to run a step again: its loss (or its gradients' norm) is inf or nan, or more than ``threshold``
    (relative) from the running mean of those before it (the monitor's AnomalyTurbulence; None: non-finite
    values only). The gradients' norm catches a fault in the backward, which the step's loss never sees."""

    threshold: float | None = 1.0
    mean: float = 0.0
    count: int = 0

    gradient_mean: float = 0.0
    gradient_count: int = 0

    def fires(self, loss: float, gradient_norm: float | None = None) -> str | None:
        """Why the step is to be run again, or None; a step that fires stays out of the series."""
        if not math.isfinite(loss):
            return f"the loss is {loss}"
        if gradient_norm is not None and not math.isfinite(gradient_norm):
            return f"the gradients' norm is {gradient_norm}"
        if self.threshold is not None:
            if turbulent(loss, self.mean, self.count, self.threshold):
                return f"the loss {loss:.6g} is more than {self.threshold:g} from its mean {self.mean:.6g}"
            if gradient_norm is not None and turbulent(
                gradient_norm, self.gradient_mean, self.gradient_count, self.threshold
            ):
                return (
                    f"the gradients' norm {gradient_norm:.6g} is more than {self.threshold:g} from its mean "
                    f"{self.gradient_mean:.6g}"
                )
        self.mean, self.count = (self.mean * self.count + loss) / (self.count + 1), self.count + 1
        if gradient_norm is not None:
            self.gradient_mean = (self.gradient_mean * self.gradient_count + gradient_norm) / (self.gradient_count + 1)
            self.gradient_count += 1
        return None


@dataclass
class Verdict:
    step: int
    kind: str  # PERSISTENT or TRANSIENT
    reason: str  # why the rule fired
    call: Call | None  # the call named (see the module docstring)
    first_loss: float
    second_loss: float
    calls: int  # calls recorded in the first execution
    notes: list[str] = field(default_factory=list)

    def line(self) -> str:
        where = self.call.where() if self.call is not None else "no call"
        if self.kind == PERSISTENT:
            what = (
                f"{where}, the first to make an inf or nan"
                if self.call is not None
                else ("no call made an inf or nan: compare this step's dump with a good step's to see where it grows")
            )
            return (
                f"step {self.step}: persistent ({self.reason}; the step run again from its saved state gives the "
                f"same {self.calls} calls bit for bit, so the code or the data, not the hardware): {what}"
            )
        return (
            f"step {self.step}: transient ({self.reason}; run again from its saved state the step gives loss "
            f"{self.second_loss:.6g}, where it gave {self.first_loss:.6g}; suspect the hardware): the executions "
            f"part at {where}"
        )

    def to_json(self) -> dict:
        call = None if self.call is None else {
            "index": self.call.index, "name": self.call.name, "occurrence": self.call.occurrence,
            "module": self.call.module, "nonfinite": self.call.nonfinite,
        }  # fmt: skip
        return {
            "step": self.step,
            "verdict": self.kind,
            "reason": self.reason,
            "call": call,
            "loss": {"first": str(self.first_loss), "again": str(self.second_loss)},
            "calls": self.calls,
        }


def first_difference(first: list[Call], second: list[Call]) -> Call | None:
    """The first call of ``first`` whose name or result is not ``second``'s at the same place (None: the same)."""
    for ours, theirs in zip(first, second):
        if (ours.name, ours.checksum) != (theirs.name, theirs.checksum):
            return ours
    if len(first) != len(second):
        shorter = min(len(first), len(second))
        return first[shorter] if shorter < len(first) else second[shorter]
    return None


def judge(
    step: int, reason: str, first: list[Call], second: list[Call], first_loss: float, second_loss: float
) -> Verdict:
    """Persistent when the two executions' calls are the same bit for bit (and so are their losses)."""
    parted = first_difference(first, second)
    same_loss = first_loss == second_loss or (math.isnan(first_loss) and math.isnan(second_loss))
    if parted is None and same_loss:
        made = next((call for call in first if call.nonfinite), None)
        return Verdict(step, PERSISTENT, reason, made, first_loss, second_loss, len(first))
    return Verdict(step, TRANSIENT, reason, parted, first_loss, second_loss, len(first))
