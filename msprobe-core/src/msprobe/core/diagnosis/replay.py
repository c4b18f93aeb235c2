"""Where a compiled run parts from its eager run, judged against a float64 replay of each value.

A compiler changes rounding everywhere, so "the first value that differs" is the first value it touched.
What matters is the first value the compiler computed worse than the eager run did from the same inputs: each
value is replayed alone in float64 on the inputs each run gave it, and the run's distance from that replay
is its own error. A value departs when the compiled run's error is larger than rounding in its dtype
explains: ``EAGER_FACTOR`` times the eager run's error, and ``ROUNDING_ULPS`` units in the last place of its
largest value. Because each value is judged on its own inputs, an error made upstream does not make every
later value depart: the first that does is where the compiler changed the numbers.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from msprobe.core.diagnosis.answer import DIVERGENCE, NONE, Diagnosis

ROUNDING_ULPS = 64  # a value's own rounding: up to this many ulps of its largest value
EAGER_FACTOR = 16  # and up to this many times the eager value's own distance from float64


@dataclass
class ReplayedValue:
    """One value of the compiled graph (a node's output, a kernel's output, a gradient), with both runs'
    distances from its float64 replay, each relative to the replay's largest magnitude."""

    name: str  # the FX node ("h"), or a kernel's output ("cpp_fused_gelu_0:h")
    op: str
    eps: float  # the machine epsilon of the value's dtype
    eager_error: float
    compiled_error: float
    module: str = ""  # the innermost module whose forward made it
    phase: str = "forward"
    kernel: str = ""  # the generated kernel that computed it, where known

    @property
    def departs(self) -> bool:
        return departs(self.eager_error, self.compiled_error, self.eps)


def departs(eager_error: float, compiled_error: float, eps: float) -> bool:
    """Whether a compiled value's error is more than rounding explains (see the module docstring)."""
    return compiled_error > max(EAGER_FACTOR * eager_error, ROUNDING_ULPS * eps)


def diagnose_replayed(values: Iterable[ReplayedValue], what: str = "compiled graph") -> Diagnosis:
    """The first value, in the order given, that departs; ``none`` when none does."""
    checked = list(values)
    first = next((value for value in checked if value.departs), None)
    if first is None:
        detail = f"no value of the {what} departs from eager beyond rounding ({len(checked)} checked, each "
        return Diagnosis(NONE, detail=detail + "against its float64 replay)", compared=len(checked))
    detail = f"{first.op}: {first.compiled_error:.3g} from its float64 replay against {first.eager_error:.3g} eagerly"
    if first.kernel:
        detail += f"; computed in kernel {first.kernel}"
    return Diagnosis(
        DIVERGENCE,
        phase=first.phase,
        module=first.module or None,
        api=first.name,
        cause="backward" if first.phase == "backward" else "computation",
        detail=detail,
        error=first.compiled_error,
        compared=len(checked),
    )
