"""Where two runs of one step part ways, and why: the exact rules (``explain``), and, when the runs differ
everywhere by rounding, the search for what rounding cannot explain (``noise``).
"""

from __future__ import annotations

from msprobe.core.diagnosis.analysis import (
    AMPLIFICATION,
    LAYOUT_STANDOUT,
    ROUNDING,
    SYSTEMATIC,
    PairAnalysis,
    cast_words,
)
from msprobe.core.diagnosis.answer import DIVERGENCE, NONE, UNCERTAIN, Diagnosis
from msprobe.core.diagnosis.calls import BACKWARD, Call
from msprobe.core.diagnosis.explain import (
    answer_at,
    explain,
    first_difference,
    gradient_entry_alone,
    in_phase_words,
    inputs_words,
    join,
    one_sided_anywhere,
)
from msprobe.core.diagnosis.noise import masks_within_noise, noise_floor, noisy


def _given_in_the_forward(analysis: PairAnalysis, first: Call) -> Diagnosis | None:
    """A backward entry that differs first, whose call was already given other weights or inputs in the forward
    though its outputs rounded the same (a weight one unit in the last place off): the answer is that forward
    call, where what differs was given, not its backward, where it shows."""
    if first.kind != "api" or first.direction != BACKWARD or first.phase != BACKWARD:
        return None
    forward = analysis.forward_twin(first)
    if forward is None or analysis.pairing.of(forward) is None:
        return None
    difference = analysis.difference(forward)
    if difference.outputs or not (difference.inputs or difference.params):
        return None
    found = explain(analysis, forward)
    if found.verdict != DIVERGENCE or found.cause not in ("weights", "data", "undumped"):
        return None
    found.detail = join(found.detail, f"its outputs round the same; the difference shows first in {first.name}")
    return found


def decide(analysis: PairAnalysis, settled: bool = True) -> Diagnosis:
    """``settled``: every earlier step of the two runs agreed bit for bit (or there was none), so a parameter
    that differs here differs for a reason, not from the rounding of earlier steps."""
    compared = len(analysis.pairing.partner)
    first = first_difference(analysis)
    alone = gradient_entry_alone(analysis, first)
    if alone is not None:
        alone.compared = compared
        return alone
    if first is None:
        return _no_divergence(analysis, compared)
    found = _given_in_the_forward(analysis, first) or explain(analysis, first)
    spelt, where = masks_within_noise(analysis, first)
    if spelt:  # a boolean mask for an additive one, every call given it within the noise: the same mask
        analysis.spell_alike(spelt)
        mask_words = (
            f"{where[0].name}'s boolean mask is taken as the benchmark's additive one: every call given it agrees "
            "within rounding"
        )
        first = first_difference(analysis)
        if first is None:
            return Diagnosis(NONE, detail=mask_words, compared=compared)
        found = explain(analysis, first)
    # a computation differing by a rounding-sized amount, or by an amount checksums cannot tell: noise?
    unknown = found.error is None or found.error <= _rounding(analysis)
    # an argument named upstream, at a call whose outputs agree as far as the dump shows: perhaps only spelt
    # another way (arange(0, n) for arange(n)); rounding-sized differences after it are weighed as noise
    unseen = found.cause == "argument" and found.api != first.name and not _outputs_differ(analysis, found.api)
    # weighed as noise unless something says it is none: an earlier call of its kind agreed bit for bit, or
    # the call is further off than its own rounding takes it
    if (
        unknown
        and (found.cause in ("computation", "undumped") or unseen)
        and not ((analysis.agreed_before(first) and not analysis.other_layout) or analysis.rounds_too_far(first))
    ):
        found = noisy(analysis, first, settled)
    elif found.cause == "weights" and not settled and not found.nonfinite:
        found = noisy(analysis, first, settled)
    elif found.cause == "calls" and cast_words(analysis, first) and analysis.cast_sites() >= SYSTEMATIC:
        found = noisy(analysis, first, settled)
    if found.verdict == UNCERTAIN:
        # among rounding differences, a parameter with a gradient in one run alone is still no rounding
        one_sided = one_sided_anywhere(analysis)
        if one_sided is not None:
            one_sided.confidence = "high"
            one_sided.detail = join(one_sided.detail, f"beside rounding differences from {first.name} on")
            found = one_sided
    if spelt:
        found.detail = join(found.detail, mask_words)
    found.compared = compared
    return in_phase_words(found)


def _rounding(analysis: PairAnalysis) -> float:
    """The largest first difference taken for rounding. Between runs of other layouts, rounding is what their
    sums in another order do, measured here (the noise floor of the calls given bit-identical inputs): far
    below ``ROUNDING``, which allows for other hardware."""
    if not analysis.other_layout:
        return ROUNDING
    return min(ROUNDING, max(LAYOUT_STANDOUT, AMPLIFICATION * noise_floor(analysis)))


def _outputs_differ(analysis: PairAnalysis, name: str | None) -> bool:
    call = analysis.named(name)
    return call is None or analysis.outputs_differ(call)


def _no_divergence(analysis: PairAnalysis, compared: int) -> Diagnosis:
    met = analysis.met_again_at
    if met:
        names = ", ".join(call.name for call in met[:3]) + (f" and {len(met) - 3} more" if len(met) > 3 else "")
        detail = (
            f"the values of {names} differ, and every later call given them returns the same: the runs meet "
            "again (a value spelt another way, such as a boolean mask for an -inf one)"
        )
        return Diagnosis(NONE, detail=detail, compared=compared)
    return Diagnosis(NONE, detail=no_divergence_words(compared, analysis.unpaired), compared=compared)


def no_divergence_words(compared: int, unpaired: int) -> str:
    words = f"every output of the {compared} paired calls is bit-identical"
    if unpaired:
        words += f" ({unpaired} calls made by one run only change no value)"
    return words


# -- an argument whose effect shows only later ---------------------------------------------------------------
# A call may take another non-tensor argument and still return bit-identical outputs: an argument spelt
# another way (``arange(0, n)`` for ``arange(n)``) changes nothing, but a norm's ``momentum`` changes the
# running statistics it writes in place, which only the same call's inputs show, a step later.


def latent_argument(analysis: PairAnalysis) -> Call | None:
    """The first paired call of a step whose outputs all agree that was given another non-tensor argument."""
    for call in analysis.ours:
        if call.order not in analysis.extra and analysis.pairing.of(call) is not None:
            if analysis.difference(call).changed_arguments:
                return call
    return None


def carried_state(analysis: PairAnalysis, name: str) -> Call | None:
    """The call named ``name`` (a later step's than the latent call's), when it is given tensors that differ
    although every output agrees: state the latent call wrote in place, read back by it."""
    call = analysis.named(name)
    if call is None or call.order in analysis.extra:
        return None
    difference = analysis.difference(call)
    return call if difference.inputs or difference.params else None


def argument_shown_later(latent: Call, words: str, analysis: PairAnalysis, reader: Call, step: object) -> Diagnosis:
    """The latent call (``words``: its arguments that differ) as the divergence: ``reader``, of ``analysis``'s
    step ``step``, shows its effect."""
    difference = analysis.difference(reader)
    words = join(
        words,
        f"its outputs agree, but what it writes in place differs: at step {step}, {reader.name} is given "
        f"{inputs_words(difference.inputs + difference.params)} that differ",
    )
    return answer_at(latent, "argument", words)
