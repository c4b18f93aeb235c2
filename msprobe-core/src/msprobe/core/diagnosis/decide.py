"""Where two runs of one step part ways, and why: the exact rules (``explain``), and, when the runs differ
everywhere by rounding, the search for what rounding cannot explain (``noise``).
"""

from __future__ import annotations

from msprobe.core.diagnosis.analysis import ROUNDING, SYSTEMATIC, PairAnalysis, cast_words
from msprobe.core.diagnosis.answer import NONE, Diagnosis
from msprobe.core.diagnosis.explain import explain, first_difference, in_phase_words
from msprobe.core.diagnosis.noise import noisy


def decide(analysis: PairAnalysis, settled: bool = True) -> Diagnosis:
    """``settled``: every earlier step of the two runs agreed bit for bit (or there was none), so a parameter
    that differs here differs for a reason, not from the rounding of earlier steps."""
    compared = len(analysis.pairing.partner)
    first = first_difference(analysis)
    if first is None:
        return _no_divergence(analysis, compared)
    found = explain(analysis, first)
    # a computation differing by a rounding-sized amount, or by an amount checksums cannot tell: noise?
    unknown = found.error is None or found.error <= ROUNDING
    if unknown and found.cause == "computation" and not analysis.agreed_before(first):
        found = noisy(analysis, first, settled)
    elif found.cause == "weights" and not settled and not found.nonfinite:
        found = noisy(analysis, first, settled)
    elif found.cause == "calls" and cast_words(analysis, first) and analysis.cast_sites() >= SYSTEMATIC:
        found = noisy(analysis, first, settled)
    found.compared = compared
    return in_phase_words(found)


def _no_divergence(analysis: PairAnalysis, compared: int) -> Diagnosis:
    return Diagnosis(NONE, detail=no_divergence_words(compared, analysis.unpaired), compared=compared)


def no_divergence_words(compared: int, unpaired: int) -> str:
    words = f"every output of the {compared} paired calls is bit-identical"
    if unpaired:
        words += f" ({unpaired} calls made by one run only change no value)"
    return words
