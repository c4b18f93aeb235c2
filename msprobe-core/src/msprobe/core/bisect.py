"""Precision bisection, framework-free: which modules a low-precision step needs in float32 to come back within a
tolerance of its float32 twin.

A backend gives one function, ``error(upcast)``: run the step with the modules of ``upcast`` in float32 and the
rest in low precision, and say how far its loss and gradients are from the float32 twin's. Upcasting more is
assumed never to hurt (monotone), as for any precision: the search then needs about log2(N) runs per module
the answer holds (group testing over suffixes of the candidates), then one run per module of the answer to check
that none can be left out.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

# what a search can conclude
NOTHING_NEEDED = "nothing needed"  # the low-precision step is within the tolerance as it is
FOUND = "found"  # the minimal set brings it back
NOT_ENOUGH = "not enough"  # even every candidate in float32 stays beyond the tolerance: the cause lies outside them


@dataclass(frozen=True)
class Measured:
    """One run: which modules were in float32, and the step's distance from the float32 twin."""

    upcast: tuple[str, ...]
    error: float

    def within(self, tolerance: float) -> bool:
        return math.isfinite(self.error) and self.error <= tolerance


@dataclass
class Bisection:
    """A search's outcome: the minimal set, each candidate's sensitivity (the error with it alone in low
    precision, the rest in float32), and every run made."""

    outcome: str
    tolerance: float
    dtype: str
    minimal: list[str]
    baseline: float  # nothing upcast
    upcast_all: float  # every candidate upcast
    final: float  # the minimal set upcast
    sensitivity: dict[str, float] = field(default_factory=dict)
    runs: list[Measured] = field(default_factory=list)

    def line(self) -> str:
        count = f"{len(self.runs)} runs"
        if self.outcome == NOTHING_NEEDED:
            return (
                f"nothing needs float32: the {self.dtype} step is within {self.tolerance:g} of its float32 twin "
                f"as it is (error {_number(self.baseline)}; {count})"
            )
        if self.outcome == NOT_ENOUGH:
            return (
                f"not found among the candidates: with every candidate in float32 the {self.dtype} step is still "
                f"{_number(self.upcast_all)} from its float32 twin (tolerance {self.tolerance:g}); the low "
                f"precision that matters is outside them (the loss, or code in a parent's own forward; {count})"
            )
        modules = ", ".join(self.minimal)
        if not (math.isfinite(self.final) and self.final <= self.tolerance):
            return (
                f"no set found: upcasting more modules did not always bring the {self.dtype} step closer to its "
                f"float32 twin, and the modules the search kept ({modules}) leave it {_number(self.final)} away "
                f"(tolerance {self.tolerance:g}; {count}); give the candidates yourself (--module)"
            )
        return (
            f"{len(self.minimal)} module{'s need' if len(self.minimal) != 1 else ' needs'} float32: {modules} "
            f"(error {_number(self.baseline)} in {self.dtype}, {_number(self.final)} with "
            f"{'it' if len(self.minimal) == 1 else 'them'} in float32; tolerance {self.tolerance:g}; {count})"
        )

    def table(self) -> str:
        """Each candidate's sensitivity, largest first, and whether it is in the minimal set."""
        if not self.sensitivity:
            return self.line()
        width = max(len("module"), *(len(name) for name in self.sensitivity))
        lines = [f"{'module':<{width}}  {'error alone in ' + self.dtype:>22}  needed"]
        ranked = sorted(self.sensitivity.items(), key=lambda item: _order(item[1]), reverse=True)
        for name, error in ranked:
            lines.append(f"{name:<{width}}  {_number(error):>22}  {'yes' if name in self.minimal else ''}".rstrip())
        return "\n".join([*lines, self.line()])

    def to_json(self) -> dict:
        return {
            "outcome": self.outcome,
            "dtype": self.dtype,
            "tolerance": self.tolerance,
            "minimal": self.minimal,
            "error": {"baseline": _finite(self.baseline), "upcast_all": _finite(self.upcast_all),
                      "minimal": _finite(self.final)},
            "sensitivity": {name: _finite(error) for name, error in self.sensitivity.items()},
            "runs": [{"upcast": list(run.upcast), "error": _finite(run.error)} for run in self.runs],
        }  # fmt: skip


def _order(error: float) -> float:
    return math.inf if not math.isfinite(error) else error


def _finite(error: float) -> float | str:
    return error if math.isfinite(error) else str(error)


def _number(error: float) -> str:
    return f"{error:.3g}" if math.isfinite(error) else ("non-finite" if math.isnan(error) else "inf")


def estimated_runs(candidates: int, rank: bool = True) -> int:
    """The runs a search of one needed module takes (a progress bar's total until more are found)."""
    return 4 + math.ceil(math.log2(max(candidates, 1))) + (candidates if rank else 0)


def bisect(
    candidates: Sequence[str],
    error: Callable[[tuple[str, ...]], float],
    tolerance: float,
    dtype: str,
    rank: bool = True,
    progress: Callable[[str], None] | None = None,
) -> Bisection:
    """The smallest set of ``candidates`` whose float32 upcast brings the step within ``tolerance``.

    ``rank``: also measure each candidate alone in low precision (one run each), for the sensitivity table."""
    runs: list[Measured] = []
    cache: dict[frozenset[str], Measured] = {}
    order = {name: index for index, name in enumerate(candidates)}

    def measure(upcast: set[str] | Sequence[str], why: str) -> Measured:
        key = frozenset(upcast)
        if key not in cache:
            if progress is not None:
                progress(why)
            modules = tuple(sorted(key, key=order.__getitem__))
            cache[key] = Measured(modules, float(error(modules)))
            runs.append(cache[key])
        return cache[key]

    def passes(upcast: set[str] | Sequence[str], why: str) -> bool:
        return measure(upcast, why).within(tolerance)

    baseline = measure((), "the step as it is")
    everything = measure(candidates, "every candidate in float32")
    result = Bisection(NOTHING_NEEDED, tolerance, dtype, [], baseline.error, everything.error, baseline.error)
    if baseline.within(tolerance):
        pass  # nothing needed: the outcome as made above
    elif not everything.within(tolerance):
        result.outcome, result.final = NOT_ENOUGH, everything.error
    else:
        result.outcome = FOUND
        result.minimal = _minimal_set(list(candidates), passes)
        result.final = measure(result.minimal, "the minimal set").error
    if rank:
        everyone = set(candidates)
        for name in candidates:
            result.sensitivity[name] = measure(everyone - {name}, f"{name} alone in {dtype}").error
    result.runs = runs
    return result


def _minimal_set(candidates: list[str], passes: Callable[[set[str], str], bool]) -> list[str]:
    """Group testing over suffixes: the shortest suffix of the remaining candidates that passes (with the modules
    already needed) starts with a module that is needed; the search goes on among those after it. Then each module
    found is tried without, in case a later find made an earlier one unneeded.

    Suffixes, not prefixes: a module's float32 output flows on into the modules after it, so under autocast an
    earlier module's upcast may also spare a later one whose own arithmetic is what low precision breaks (an
    elementwise module computes in the dtype it is given). Of two such answers the later module is the one to
    name."""
    needed: list[str] = []
    remaining = list(candidates)
    while remaining and not passes(set(needed), "the modules found so far"):
        low, high = 0, len(remaining) - 1  # every remaining candidate with the needed ones passes
        while low < high:
            middle = (low + high + 1) // 2
            if passes(set(needed) | set(remaining[middle:]), f"{len(needed) + len(remaining) - middle} modules"):
                low = middle
            else:
                high = middle - 1
        needed.append(remaining[low])
        remaining = remaining[low + 1 :]
    for name in list(needed):
        if len(needed) > 1 and passes(set(needed) - {name}, f"without {name}"):
            needed.remove(name)
    order = {name: index for index, name in enumerate(candidates)}
    return sorted(needed, key=order.__getitem__)
