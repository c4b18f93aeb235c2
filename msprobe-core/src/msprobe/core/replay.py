"""Replay's verdict: which of the other run's values, put in place of this run's, bring a module's output back.

A module where two runs part ways is run again, in this process, four times: with this run's inputs and
weights (which must give this run's output again, or the replay proves nothing), with the golden run's
inputs, with its weights, and with both. The first substitution whose output is the golden run's names the
cause: what came into the module from upstream, its weights, both, or, when even the golden run's inputs
and weights give another output here, the computation itself (another kernel, dtype or argument). The
framework runs the module; this module only weighs what came out, so both backends share it.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np

INPUTS, WEIGHTS, BOTH, COMPUTATION, NONE, UNCONFIRMED = (
    "inputs",
    "weights",
    "inputs and weights",
    "computation",
    "none",
    "unconfirmed",
)
# a replay of this run's own inputs and weights this close (relative) to this run's output reproduces it
REPRODUCES = 1e-6
# a substitution whose output is this much closer to the golden output than this run's was brings it back
BROUGHT_BACK = 0.1
# ... or, when this run's output cannot be measured against the golden one (another shape), this near to it
NEAR = 1e-2


@dataclass
class Trial:
    """One run of the module: whose inputs and whose weights, and how far its output is from the golden's."""

    inputs: str  # "this run's" or "the golden run's"
    weights: str
    error: float


@dataclass
class ReplayReport:
    """What replaying one module call found."""

    module: str
    entry: str  # the module call's entry name
    baseline: float  # this run's output against the golden run's (relative)
    reproduced: float  # the replay of this run's inputs and weights against this run's output
    random: bool = False  # the module draws random numbers (two draws gave other outputs)
    unrecorded: list[str] = field(default_factory=list)  # parameters a dump lacked, the model's own there
    trials: list[Trial] = field(default_factory=list)
    cause: str = UNCONFIRMED
    words: str = ""

    def table(self) -> str:
        """One line per run of the module, for a terminal."""
        lines = [f"replay of {self.entry} (module {self.module}):"]
        lines.append(f"  this run's output against the golden run's: {_error(self.baseline)}")
        lines.append(f"  this run's inputs and weights, replayed, against this run's output: {_error(self.reproduced)}")
        for trial in self.trials:
            lines.append(
                f"  {trial.inputs} inputs, {trial.weights} weights: {_error(trial.error)} from the golden output"
            )
        if self.unrecorded:
            lines.append(
                f"  parameters neither dump recorded, the model's own on both sides: {', '.join(self.unrecorded)}"
            )
        lines.append(f"cause: {self.cause}: {self.words}")
        return "\n".join(lines)


def relative_error(ours: Sequence[np.ndarray], theirs: Sequence[np.ndarray]) -> float:
    """How far a call's outputs are from another's: the norm of the difference over the norm of the other,
    over every output tensor together (inf when the shapes differ or an inf or nan stands where the other has
    none)."""
    if len(ours) != len(theirs):
        return math.inf
    difference = 0.0
    scale = 0.0
    for mine, other in zip(ours, theirs):
        a, b = np.asarray(mine, dtype=np.float64), np.asarray(other, dtype=np.float64)
        if a.shape != b.shape:
            return math.inf
        finite_a, finite_b = np.isfinite(a), np.isfinite(b)
        if not np.array_equal(finite_a, finite_b) or not np.array_equal(a[~finite_a], b[~finite_b]):
            return math.inf
        difference += float(np.sum((a[finite_a] - b[finite_b]) ** 2))
        scale += float(np.sum(b[finite_b] ** 2))
    if difference == 0.0:
        return 0.0
    return math.sqrt(difference / scale) if scale > 0 else math.inf


def decide(
    baseline: float,
    reproduced: float,
    trials: list[Trial],
    random: bool = False,
    unrecorded: Sequence[str] = (),
) -> tuple[str, str]:
    """The cause and its words from the runs of the module (in the order: golden inputs, golden weights,
    both); ``random``: the module draws random numbers, so no run of it stands for the dumped one;
    ``unrecorded``: weights a dump lacked (``name (side)``); those both lacked no substitution could change."""
    if random:
        return UNCONFIRMED, (
            "the module draws random numbers (dropout, sampling): its replays differ from one draw to the next, so "
            "no substitution proves anything; replay it in eval mode, or a module inside it that draws none"
        )
    if reproduced > REPRODUCES:
        return UNCONFIRMED, (
            f"replaying this run's own inputs and weights gives another output ({_error(reproduced)} from it): the "
            "module depends on what the dump does not hold (randomness, buffers, state, hooks), so no substitution "
            "proves anything"
        )
    if baseline == 0.0:
        return NONE, "this run's output is the golden run's: there is nothing to explain here"
    # closer by BROUGHT_BACK; from outputs of another shape (or an inf where the other has none), near by that
    limit = BROUGHT_BACK * baseline if math.isfinite(baseline) else NEAR
    back = {(trial.inputs, trial.weights): math.isfinite(trial.error) and trial.error <= limit for trial in trials}
    golden = "the golden run's"
    if back.get((golden, "this run's")):
        return INPUTS, "the golden run's inputs give the golden output: the difference comes from upstream"
    if back.get(("this run's", golden)):
        return WEIGHTS, "the golden run's weights give the golden output: the module's weights differ"
    if back.get((golden, golden)):
        return BOTH, "only the golden run's inputs and weights together give the golden output"
    unknown = [name for name in unrecorded if name.endswith("(both)")]  # no substitution ever changes those
    if unknown:
        return UNCONFIRMED, (
            "no substitution gives the golden output, but neither dump holds some of the module's weights (the "
            f"model's own stood in on both sides: {', '.join(unknown)}): they may differ, or the computation may"
        )
    return COMPUTATION, (
        "the golden run's own inputs and weights give another output here: this run computes the module "
        "otherwise (another kernel, dtype or argument)"
    )


def _error(value: float) -> str:
    return "identical" if value == 0.0 else "inf" if math.isinf(value) else f"{value:.2e} (relative)"


# the diagnosis's cause (msprobe.core.diagnosis.answer.CAUSES) -> the replay cause that confirms it
CONFIRMS = {"weights": WEIGHTS, "computation": COMPUTATION, "argument": COMPUTATION, "data": INPUTS, "undumped": INPUTS}


def confirmation(diagnosis_cause: str | None, report: ReplayReport) -> str:
    """What the replay says of the diagnosis's answer, in one line."""
    head = f"replay of {report.entry}"
    if report.cause == UNCONFIRMED:
        return f"{head}: unconfirmed: {report.words}"
    expected = CONFIRMS.get(diagnosis_cause or "")
    if expected is None:
        return f"{head}: {report.cause}: {report.words} (a forward replay does not test the cause '{diagnosis_cause}')"
    if report.cause == expected:
        return f"{head} confirms it: {report.words}"
    return f"{head} disagrees: it finds the {report.cause}: {report.words}"


def module_call(construct: dict, module: str, entry: str | None) -> int:
    """Which call of ``module`` made ``entry`` (the call where the runs part ways): the count of the module's
    forward entry construct.json gives as its parent; 0 when none says."""
    from msprobe.core.dump.entry_names import FORWARD, parse_entry

    own = parse_entry(entry) if entry else None
    if own is not None and own.is_module and own.path == module and own.count is not None:
        return own.count
    parent = construct.get(entry) if entry else None
    while isinstance(parent, str):
        parsed = parse_entry(parent)
        if parsed is not None and parsed.is_module and parsed.path == module and parsed.direction == FORWARD:
            return parsed.count or 0
        parent = construct.get(parent)
    return 0
