"""Runs that differ everywhere by rounding (other hardware, another precision): what rounding cannot explain.

When the first difference is a computation differing by a rounding-sized amount, and no earlier call of its
kind agreed bit for bit, it is not the answer. The calls are walked again for evidence no rounding makes: a
weight (in a step where the weights start equal), the data, a first inf or nan, outputs far out of proportion
to what a call was given, an argument, a cast, a call returning another dtype, an extra or missing call whose
effect is larger than the noise. Failing that, the first forward call whose error is out of proportion to
the error it was given; failing that, "uncertain".
"""

from __future__ import annotations

import math

from msprobe.core.diagnosis.analysis import (
    AMPLIFICATION,
    FAR_OFF,
    LAYOUT_STANDOUT,
    STANDOUT,
    SYSTEMATIC,
    Difference,
    PairAnalysis,
    cast_words,
    returns_other_dtype,
)
from msprobe.core.diagnosis.answer import UNCERTAIN, Diagnosis
from msprobe.core.diagnosis.calls import BACKWARD, FORWARD, OPTIMIZER, Call, Value
from msprobe.core.diagnosis.explain import (
    answer_at,
    argument_name,
    arguments_words,
    data_words,
    dtype_words,
    explain,
    gradient_made_by_extra,
    inputs_words,
    join,
    own_weights,
    skipped_module,
    trace,
    written_after,
)
from msprobe.core.diagnosis.nonfinite import makes_nonfinite
from msprobe.core.diagnosis.values import scale_factor


def noise_floor(analysis: PairAnalysis) -> float:
    """What rounding alone does to an output here: the typical error of the forward calls given bit-identical
    inputs and returning different outputs (none: the lowest quarter of every forward call's error). A module
    with modules inside it is left out: its error is theirs, carried on."""
    fresh, every = [], []
    judged = analysis.judged_kind
    for call in analysis.ours:
        if call.phase != FORWARD or call.kind != judged or call.order in analysis.extra:
            continue
        if call.kind == "module" and call.name in analysis.containers:
            continue
        difference = analysis.difference(call)
        error = difference.output_error
        if not difference.outputs or error is None or not math.isfinite(error):
            continue
        every.append(error)
        if not difference.inputs and not difference.params:
            fresh.append(error)
    if not fresh and analysis.exact_forward:  # no forward call rounds otherwise: there is no noise to measure
        return 0.0
    chosen = sorted(fresh) or sorted(every)[: max(1, len(every) // 4)]
    if not chosen or (analysis.other_layout and len(fresh) == 1):
        # runs of other layouts: one call alone computing otherwise from the same inputs is the suspect, and
        # no other call's rounding is there to measure it by
        return 0.0
    # runs of other layouts round alike everywhere (sums in another order): of few fresh differences, the
    # lower middle one, so one call computing otherwise cannot set the floor it is judged by
    return chosen[(len(chosen) - 1) // 2] if analysis.other_layout else chosen[len(chosen) // 2]


def masks_within_noise(analysis: PairAnalysis, first: Call) -> tuple[set[tuple], list[Call]]:
    """The masks spelt otherwise from ``first`` on (a boolean one for the benchmark's additive one, see
    ``PairAnalysis.masks_spelt_otherwise``), and the calls they differ at, where every call given them returns
    outputs within ``STANDOUT`` of the benchmark's (or, a call this run alone makes, a value the benchmark's
    run holds: the mask filled in with -inf): among rounding differences, the runs that meet again. Not a mask
    a call given it is further off from (one that masks otherwise), nor one no distance is known for
    (checksums). The calls given a mask are the noise here, so it is not measured from them."""
    masks: set[tuple] = set()
    where: list[Call] = []
    for call in analysis.ours:
        if call.order < first.order or call.phase != FORWARD or call.order in analysis.extra:
            continue
        if not any(value.dtype == "bool" for value in (*call.tensors("inputs"), *call.tensors("outputs"))):
            continue  # a boolean on one side or the other: only such a call can be one
        found = analysis.masks_spelt_otherwise(call)
        if found - masks and _within(analysis, analysis.given(found)):
            masks |= found
            where.append(call)
    return masks, where


def _within(analysis: PairAnalysis, given: list[Call]) -> bool:
    if not given:
        return False
    for call in given:
        if call.order in analysis.extra:
            if not analysis.makes_theirs(call):
                return False
            continue
        error = analysis.difference(call).output_error
        if error is None or not math.isfinite(error) or error > STANDOUT:
            return False
    return True


def noisy(analysis: PairAnalysis, first: Call, settled: bool = True) -> Diagnosis:
    """The runs differ by rounding from ``first`` on: name what rounding does not explain, or say uncertain.
    A cast is evidence, unless this run casts before many calls: that is the precision it runs in."""
    casts = analysis.cast_sites() < SYSTEMATIC
    floor = noise_floor(analysis)
    threshold = max(LAYOUT_STANDOUT if analysis.other_layout else STANDOUT, AMPLIFICATION * floor)
    for call in analysis.ours:
        if call.order in analysis.extra or call.order < first.order or not analysis.difference(call).outputs:
            continue
        found = _evidence(analysis, call, threshold, settled, casts)
        if found is not None:
            found.confidence = "high"
            found.detail = join(found.detail, f"beside rounding differences from {first.name} on")
            return found
    standout = _standout(analysis, first, threshold)
    if standout is None and analysis.other_layout:
        gradient = _gradient_standout(analysis, first, threshold)
        if gradient is not None:
            found = explain(analysis, gradient)
            found.confidence = "medium"
            found.detail = join(found.detail, f"beside rounding differences from {first.name} on")
            return found
    if standout is not None:
        call, ratio = standout
        found = explain(analysis, call, amplified=True)
        found.cause = "computation"
        found.detail = join(found.detail, f"its error is {_times(ratio)} the error of what it was given")
        found.confidence = "medium" if ratio < 4 * AMPLIFICATION else "high"
        return found
    error = analysis.difference(first).output_error
    if not casts:
        return Diagnosis(
            UNCERTAIN, phase=first.phase, module=first.module, api=first.name, cause="calls",
            detail=f"from {first.name} on, {analysis.cast_sites()} calls are given or return another dtype than the "
            "benchmark's: this run computes in another precision throughout, and nothing else differs beyond "
            "rounding",
            confidence="low",
        )  # fmt: skip
    if error is None and _fresh_differences(analysis) < 2:
        # checksums only, and one call alone computes differently from the same inputs: that call
        found = explain(analysis, first)
        found.confidence = "low"
        found.detail = join(found.detail, "checksums cannot tell rounding from a fault")
        return found
    if error is None:
        return Diagnosis(
            UNCERTAIN, phase=first.phase, module=first.module, api=first.name, cause="computation",
            detail=f"the runs differ from {first.name} on, in several calls given bit-identical inputs; checksums "
            "cannot tell rounding from a fault, and nothing else differs", confidence="low",
        )  # fmt: skip
    return Diagnosis(
        UNCERTAIN,
        phase=first.phase,
        module=first.module,
        api=first.name,
        cause="computation",
        detail=f"the runs differ from {first.name} on by amounts rounding explains (relative error {error:.1e}, "
        f"typical {floor:.1e}); no call's error is out of proportion to what it was given",
        confidence="low",
        error=error,
    )


def _fresh_differences(analysis: PairAnalysis) -> int:
    """Forward calls given bit-identical inputs that return different outputs: more than one means the runs
    compute differently in several places, as other hardware does."""
    count = 0
    for call in analysis.ours:
        if call.phase == FORWARD and call.kind == "api" and call.order not in analysis.extra:
            difference = analysis.difference(call)
            if difference.outputs and not (difference.inputs or difference.params or difference.arguments):
                count += 1
    return count


def _times(ratio: float) -> str:
    return "many times" if math.isinf(ratio) else f"{ratio:.0f}x"


def _evidence(
    analysis: PairAnalysis, call: Call, threshold: float, settled: bool, casts: bool = True
) -> Diagnosis | None:
    """What rounding cannot explain at ``call``: a weight (any difference in a settled step, where the weights
    start equal; else a non-finite one, or one ``FAR_OFF`` that puts the outputs as far off), a first inf or
    nan, outputs far out of proportion to what the call was given, an argument, a cast, a value an extra or a
    missing call changed by more than ``threshold``."""
    difference = analysis.difference(call)
    partner = analysis.pairing.of(call)
    theirs = {value.path: value for value in (*partner.params, *partner.inputs)} if partner else {}
    for value in (*difference.params, *difference.inputs):
        owner = analysis.owner_of(value, call)
        other = theirs.get(value.path)
        is_param = value.path.startswith("parameters.") or owner or analysis.is_parameter(call, value)
        if other is not None and other.dtype != value.dtype:
            continue  # a cast, not another weight: the cast rule below decides
        error = analysis.comparer.error(value, other) if other is not None else None
        # a weight far off, whose forward call's outputs are far off too (a weight the benchmark holds near
        # zero, such as a bias Adam moved by rounding alone, is far off relatively and changes no output much)
        far = call.phase == FORWARD and _far(error) and _far(difference.output_error)
        broken = other is not None and ((not value.finite and other.finite) or far)
        if is_param and (settled or broken):
            found = answer_at(call, "weights", argument_name(value.path), owner or call.module)
            found.error = error
            found.nonfinite = not value.finite
            return found
    if settled and call.phase == FORWARD and _computed_unseen(analysis, call, difference):
        enclosing = analysis.enclosing(call)
        found = own_weights(analysis, call, enclosing) if enclosing is not None else None
        if found is not None:
            return found
    if makes_nonfinite(call) and partner is not None and all(v.finite for v in partner.outputs):
        return explain(analysis, call)
    if call.phase == FORWARD and _far_out_of_proportion(difference):
        return explain(analysis, call, amplified=True)
    # after a step already noisy, state carried over (a norm's running statistics) differs too: only data that
    # is not finite then counts
    leaves = [
        value
        for value in difference.inputs
        if analysis.is_data(call, value)
        and (settled or not value.finite or _integral(value))
        and _beyond(analysis, call, value, threshold)
    ]
    if leaves:
        return written_after(analysis, call, leaves) or answer_at(
            call, "data", data_words(analysis, leaves), _module_of(analysis, call)
        )
    changed = difference.changed_arguments
    if changed:
        return answer_at(call, "argument", arguments_words(changed), _module_of(analysis, call))
    # among rounding differences, a backward's dtypes follow its forward's: only the forward's casts count
    cast = cast_words(analysis, call) if casts and call.phase == FORWARD else ""
    if cast:
        return answer_at(call, "calls", cast, _module_of(analysis, call))
    if casts and call.phase == FORWARD and returns_other_dtype(analysis, call):
        return answer_at(call, "computation", dtype_words(call, partner), _module_of(analysis, call))
    # in a dump of modules alone: where API calls are dumped, a hook's arithmetic is itself recorded, and
    # an API's backward entry holds only part of the gradients it returns
    modules_alone = analysis.judged_kind == "module"
    if modules_alone and call.phase == BACKWARD and _forward_within(analysis, threshold):
        scaled = _scaled_gradient(analysis, call, threshold)
        if scaled is not None:
            return scaled
    for value in difference.inputs:
        other = theirs.get(value.path)
        error = analysis.comparer.error(value, other) if other is not None else None
        if error is not None and error <= threshold:
            continue
        traced = trace(analysis, call, value, threshold)
        if traced is not None:
            return traced
        if call.phase == FORWARD and not analysis.producers("ours", value, call.order):
            # made by no dumped call, beyond the noise: in a dump of modules alone, a module one run skips (in
            # the forward: a gradient through a norm turns rounding into a larger error than the threshold)
            skipped = skipped_module(analysis, call)
            if skipped is not None:
                return skipped
        if call.phase == BACKWARD and analysis.other_layout and not analysis.producers("ours", value, call.order):
            # a gradient made by no dumped backward, beyond the noise of sums in another order: handed back
            # from another stage (or by a hook no dump records) as it differs
            words = f"{inputs_words([value])}, which no dumped call made"
            return answer_at(call, "gradient", words, _module_of(analysis, call))
    if call.kind == "grads":
        return gradient_made_by_extra(analysis, call)
    return None


def _scaled(analysis: PairAnalysis, call: Call, which: str) -> tuple[Value, float] | None:
    """A tensor among the call's ``which`` ("inputs", "outputs") that is a scaled copy of the benchmark's."""
    partner = analysis.pairing.of(call)
    if partner is None:
        return None
    theirs = {value.path: value for value in getattr(partner, which)}
    for value in call.tensors(which):
        other = theirs.get(value.path)
        factor = scale_factor(value, other) if other is not None and other.tensor else None
        if factor is not None:
            return value, factor
    return None


def _forward_within(analysis: PairAnalysis, threshold: float) -> bool:
    """Every forward call (API; module at L0) returns what the benchmark's does within ``threshold``: what
    the backward is given from the forward differs by rounding alone, so a difference born there is the
    backward's own."""
    for call in analysis.ours:
        if call.phase != FORWARD or call.kind != analysis.judged_kind or call.order in analysis.extra:
            continue
        error = analysis.difference(call).output_error
        if error is None or not math.isfinite(error) or error > threshold:
            return False
    return True


def _scaled_gradient(analysis: PairAnalysis, call: Call, threshold: float) -> Diagnosis | None:
    """What the backward alone makes, when the forward agreed within ``threshold``: a backward value that is
    the benchmark's times a factor, made so by this call (its outputs are scaled, what it was given agrees
    within ``threshold``), or given so: by the module around it, when this call is the first backward entry
    inside it (a hook or a custom backward on that module's output scales all it passes on; a scale between
    its submodules may be a constant of its forward code, which the forward's rounding hides), else by no
    dumped call (the loss, or a hook no dump records). And the gradient the loss gives the model: made by no
    dumped call, beyond ``threshold``."""
    given = _scaled(analysis, call, "inputs")
    if given is None:
        made = _scaled(analysis, call, "outputs") if _given_within(analysis, call, threshold) else None
        if made is None:
            return _loss_gradient(analysis, call, threshold)
        value, factor = made
        what = f"grad of {value.path.split('.', 1)[1]}" if call.kind == "grads" else argument_name(value.path)
        return answer_at(call, "backward", f"its {what} is {factor:.3g} times the benchmark's: {SCALED_WORDS}")
    value, factor = given
    if analysis.producers("ours", value, call.order):
        return None  # a dumped call made it so: the scale was born there, if anywhere
    words = f"{argument_name(value.path)} is {factor:.3g} times the benchmark's: {SCALED_WORDS}"
    parent = analysis.named(call.parent)
    if parent is None or parent.kind != "module" or parent.direction != BACKWARD:
        return answer_at(call, "gradient", words)
    first_inside = next((c for c in analysis.ours if c.parent == parent.name and c.kind != "grads"), None)
    if first_inside is not call or _scaled(analysis, parent, "inputs") is not None:
        return None
    return answer_at(parent, "backward", f"the gradient it passes to {call.name}, {words}")


def _given_within(analysis: PairAnalysis, call: Call, threshold: float) -> bool:
    """What the call was given agrees within ``threshold``; for a module's parameter gradients, what the
    module's backward entry before them was given."""
    if call.kind == "grads":
        entry = next(
            (c for c in reversed(analysis.ours[: call.order]) if c.kind == "module" and c.module == call.module), None
        )
        if entry is None or entry.direction != BACKWARD:
            return False
        call = entry
    return analysis.difference(call).input_error <= threshold


def _loss_gradient(analysis: PairAnalysis, call: Call, threshold: float) -> Diagnosis | None:
    """The step's first backward entry given a gradient no dumped call made, beyond ``threshold``: the loss's
    gradient differs (the loss itself, at level L0, no dump records)."""
    if call.order != analysis.first_backward or call.kind == "grads":
        return None
    difference = analysis.difference(call)
    if difference.input_error <= threshold:
        return None
    unmade = [v for v in difference.inputs if not analysis.producers("ours", v, call.order)]
    if not unmade:
        return None
    words = f"{inputs_words(unmade)}, which no dumped call made, differs beyond rounding"
    return answer_at(call, "gradient", words)


SCALED_WORDS = "every statistic alike, which rounding does not do"


def _computed_unseen(analysis: PairAnalysis, call: Call, difference: Difference) -> bool:
    """An input that differs, needs a gradient and that no dumped call of this run made."""
    return any(v.requires_grad and not analysis.producers("ours", v, call.order) for v in difference.inputs)


def _integral(value: Value) -> bool:
    """Integers (token ids, labels) are no arithmetic's result: rounding in an earlier step leaves them as
    they were."""
    return bool(value.dtype) and value.dtype.startswith(("int", "uint", "bool"))


def _far(error: float | None) -> bool:
    return error is not None and math.isfinite(error) and error > FAR_OFF


def _far_out_of_proportion(difference: Difference) -> bool:
    """Outputs more than ``FAR_OFF`` (relative) from the benchmark's, and ``AMPLIFICATION`` times further than
    what the call was given: no rounding does that (a weight scaled a thousandfold, a scale gone wrong)."""
    error = difference.output_error
    if error is None or not math.isfinite(error) or error <= FAR_OFF:
        return False
    return error > AMPLIFICATION * difference.input_error


def _beyond(analysis: PairAnalysis, call: Call, value: Value, threshold: float) -> bool:
    """The input differs from the benchmark's by more than ``threshold`` (or by what no distance measures):
    an input no dumped call made, but only rounding apart, is an undumped computation's output, not new data.
    Integers (token ids) that differ at all are beyond it."""
    if _integral(value):
        return True
    partner = analysis.pairing.of(call)
    other = next((v for v in partner.inputs if v.path == value.path), None) if partner else None
    error = analysis.comparer.error(value, other) if other is not None else None
    return error is None or error > threshold


def _module_of(analysis: PairAnalysis, call: Call) -> str | None:
    return (analysis.updated_module(call) or call.module) if call.phase == OPTIMIZER else call.module


# a parameter's gradient this much smaller (by its norm) than the step's largest is one that cancels to nothing
# (a key projection's bias under softmax): rounding is all it holds, and its relative error says nothing
CANCELLED = 1e-6


def _gradient_standout(analysis: PairAnalysis, first: Call, threshold: float) -> Call | None:
    """Runs of other layouts: the first parameters' gradient entry further off than ``threshold``. Their
    reduction over the ranks is the layout's own arithmetic (an all-reduce, a reduce-scatter); measured against
    the gradient's root mean square, a sum in another order moves it by float32's rounding, a reduction in
    bfloat16 by a thousand times that. Gradients that cancel to nothing are left out."""
    grads = [call for call in analysis.ours if call.kind == "grads" and call.order not in analysis.extra]
    norms = [_norm(value) for call in grads for value in call.outputs]
    largest = max((norm for norm in norms if norm is not None), default=0.0)
    for call in grads:
        if call.order < first.order:
            continue
        theirs = {value.path: value for value in analysis.pairing.of(call).outputs}
        for value in analysis.difference(call).outputs:
            other, norm = theirs.get(value.path), _norm(value)
            if other is None or norm is None or norm < CANCELLED * largest:
                continue
            error = analysis.comparer.error(value, other)
            if error is not None and error >= threshold:
                return call
    return None


def _norm(value: Value) -> float | None:
    norm = value.stats[3] if value.tensor and value.stats is not None else None
    return norm if norm is not None and math.isfinite(norm) else None


def _standout(analysis: PairAnalysis, first: Call, threshold: float) -> tuple[Call, float] | None:
    """The first forward call (API; module at L0) whose output error is both above ``threshold`` and out of
    proportion to the
    error of what it was given. Only the forward is judged: gradients that cancel (a normalisation's, Adam's
    first steps) turn rounding into large relative errors as a matter of course."""
    for call in analysis.ours:
        judged = call.kind == analysis.judged_kind
        if call.order < first.order or call.order in analysis.extra or not judged or call.phase != FORWARD:
            continue
        difference = analysis.difference(call)
        error = difference.output_error
        if not difference.outputs or error is None or error < threshold:
            continue
        given = difference.input_error
        if math.isinf(error) and not math.isinf(given):
            return call, math.inf
        if given == 0 or error > AMPLIFICATION * given:
            return call, (error / given if given else math.inf)
    return None
