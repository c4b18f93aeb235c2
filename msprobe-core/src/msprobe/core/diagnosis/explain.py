"""The exact rules: why the first call whose outputs differ differs, read from what it was given.

Calls are walked in the order they ran; the first paired call whose outputs are not bit-identical to the
benchmark's is where a difference shows (everything before it agrees, so no tolerance is needed). Each
differing input is traced back to the call that made it, by its summary: an extra call of this run (one that
returned it, or wrote it in place) or a missing one of the benchmark's is named; so is a cast no dump records,
a non-tensor argument, a parameter (the weights of the module that owns it), an input no call made (the data,
or the own code of the innermost module whose inputs agree), or, when nothing it was given differs, the
computation itself, looking inside a module and upstream through values a summary cannot tell apart. A
difference born in the backward is the backward's, one after it the optimizer's.
"""

from __future__ import annotations

import math
from typing import Any

from msprobe.core.diagnosis.analysis import Difference, PairAnalysis, cast_words, returns_other_dtype
from msprobe.core.diagnosis.answer import DIVERGENCE, Diagnosis
from msprobe.core.diagnosis.calls import BACKWARD, FORWARD, OPTIMIZER, Call, Value, api_kind, module_path
from msprobe.core.diagnosis.nonfinite import makes_nonfinite


def first_difference(analysis: PairAnalysis) -> Call | None:
    """The first call whose outputs differ; none when the runs meet again after every such call
    (``PairAnalysis.meeting``): a mask spelt in booleans for ``-inf``, every output after it the same."""
    differing: list[Call] = []
    covered: set[int] = set()
    for call in analysis.ours:
        if not analysis.outputs_differ(call):
            continue
        differing.append(call)
        if call.order in covered:
            continue
        on_the_way = analysis.meeting(call)
        if on_the_way is None:
            return differing[0]
        covered |= on_the_way
    analysis.met_again_at = differing
    return None


def explain(analysis: PairAnalysis, call: Call, amplified: bool = False) -> Diagnosis:
    """Why ``call``, the first whose outputs differ, differs (see the module docstring). ``amplified``: its
    outputs differ out of proportion to what it was given (among rounding differences), so its own
    computation is the answer, whatever its inputs are."""
    difference = analysis.difference(call)
    found = _amplifying(analysis, call, difference) if amplified else _because(analysis, call, difference)
    found.nonfinite = makes_nonfinite(call)
    found.error = param_error(analysis, call) if found.cause == "weights" else difference.output_error
    if found.cause in ("data", "undumped") and math.isfinite(difference.input_error):
        # inputs that differ as given: the difference is theirs, however little of it the call hands on (a
        # norm scales a whole activation's change away)
        found.error = max(found.error or 0.0, difference.input_error)
    return found


def in_phase_words(found: Diagnosis) -> Diagnosis:
    """A difference born in the backward is the backward's (the forward agreed), one in the optimizer the
    optimizer step's; what differs there is kept in the detail. An extra or missing call stays itself."""
    if found.verdict != DIVERGENCE or found.cause in ("backward", "optimizer", "gradient"):
        return found
    if found.cause == "weights" and found.phase != FORWARD:
        # weights that differ although the forward agreed: no forward call read the values that differ
        found.detail = join(found.detail, f"first read in the {found.phase}: no forward call read what differs")
    elif found.phase == BACKWARD and found.cause != "calls":
        found.detail = join(found.detail, CAUSE_WORDS.get(found.cause or "", ""))
        found.cause = "backward"
    elif found.phase == OPTIMIZER:
        found.detail = join(found.detail, CAUSE_WORDS.get(found.cause or "", ""))
        found.cause = "optimizer"
    return found


CAUSE_WORDS = {"weights": "its parameters differ", "data": "its inputs differ", "undumped": "its inputs differ",
               "computation": "",
               "argument": "", "calls": ""}  # fmt: skip


def join(*parts: str) -> str:
    return "; ".join(part for part in parts if part)


OUTSIDE = ""  # as ``module``: outside every module (None there means the call's own module)


def answer_at(
    call: Call, cause: str, detail: str = "", module: str | None = None, name: str | None = None
) -> Diagnosis:
    """A divergence at ``call``: its phase, its module (or ``module``; ``OUTSIDE``: none), its name (or
    ``name``)."""
    where = (module or None) if module is not None else call.module
    return Diagnosis(DIVERGENCE, phase=call.phase, module=where, api=name or call.name, cause=cause, detail=detail)


def _because(analysis: PairAnalysis, call: Call, difference: Difference) -> Diagnosis:
    module = call.module
    if call.phase == OPTIMIZER:
        module = analysis.updated_module(call) or module
    for value in difference.inputs:
        traced = trace(analysis, call, value)
        if traced is not None:
            return traced
    cast = cast_words(analysis, call)
    if cast:
        return answer_at(call, "calls", cast, module)
    changed = difference.changed_arguments
    if changed:
        return answer_at(call, "argument", arguments_words(changed), module)
    if difference.params:
        names = ", ".join(value.path.split(".", 1)[1] for value in difference.params)
        return answer_at(call, "weights", names, module)
    if difference.arguments:
        return answer_at(call, "argument", arguments_words(difference.arguments), module)
    if difference.one_sided:
        return one_sided_gradients(call, difference.one_sided)
    if call.kind == "grads":
        names = ", ".join(value.path.split(".", 1)[1] for value in difference.outputs)
        made = gradient_made_by_extra(analysis, call)
        return made or answer_at(call, "computation", f"parameter gradients {names}", module)
    for value in difference.inputs:
        owner = analysis.owner_of(value, call)
        if owner or analysis.is_parameter(call, value):
            return answer_at(call, "weights", argument_name(value.path), owner or module)
    # inputs a dumped call of this run returned, differing already there, were handed on: asked about a call
    # past the first difference (among rounding differences), they say nothing of where it came from
    unmade = [value for value in difference.inputs if not _handed_on(analysis, call, value)]
    if unmade:
        # made by no dumped call of either run: a collective that wrote other ranks' values into it, code no
        # dump records inside a module whose own inputs agree, or else the data
        received = analysis.collective_before(call, unmade)
        if received is not None:
            words = f"{inputs_words(unmade)}: received from other ranks through {received.name}"
            return answer_at(received, "data", words, received.module or module, received.name)
        enclosing = analysis.enclosing(call)
        if enclosing is not None:
            weights = own_weights(analysis, call, enclosing)
            if weights is not None:
                return weights
            words = f"in its own code, between its submodules: {call.name} is given inputs no dumped call made"
            return answer_at(enclosing, "computation", words, enclosing.module)
        written = written_after(analysis, call, unmade)
        if written is not None:
            return written
        skipped = skipped_module(analysis, call)
        if skipped is not None:
            return skipped
        if call.phase == BACKWARD:
            # the forward agreed, and this backward is given a gradient no dumped backward returned: the loss
            # (at level L0 no dump records it), or a hook or custom backward no dump records
            return answer_at(call, "gradient", f"{inputs_words(unmade)}, which no dumped call made", module)
        if call.phase == FORWARD and all(value.requires_grad for value in unmade):
            # data needs no gradient: these were computed, by an operator no dump records (an LSTM at level L1)
            made = extra_before(analysis, call)
            if made is not None:
                return made
            words = f"{inputs_words(unmade)}, which no dumped call made and which need a gradient"
            return answer_at(call, "undumped", words, module)
        return answer_at(call, "data", data_words(analysis, unmade), module)
    return _computation(analysis, call)


def _amplifying(analysis: PairAnalysis, call: Call, difference: Difference) -> Diagnosis:
    """A call whose outputs differ out of proportion to its inputs: an input an extra call made or wrote (or a
    missing call would have) is still named; else the call's own computation, wherever its inputs came from."""
    for value in difference.inputs:
        traced = trace(analysis, call, value)
        if traced is not None:
            return traced
    return _computation(analysis, call)


def _computation(analysis: PairAnalysis, call: Call) -> Diagnosis:
    """The call's own computation differs: a call hidden inside it or upstream of it, else its precision or
    its class."""
    partner = analysis.pairing.of(call)
    module = (analysis.updated_module(call) or call.module) if call.phase == OPTIMIZER else call.module
    hidden = _inside(analysis, call) or _upstream(analysis, call)
    if hidden is None and returns_other_dtype(analysis, call):
        return answer_at(call, "computation", dtype_words(call, partner), module)
    return hidden or answer_at(call, "computation", _class_change(call, partner), module)


def own_weights(analysis: PairAnalysis, call: Call, enclosing: Call) -> Diagnosis | None:
    """The module around ``call`` whose inputs agree has parameters that differ: its own code handed them on
    to ``call`` through operators no dump records (a class token expanded and concatenated)."""
    weights = analysis.difference(enclosing).params
    if not weights:
        return None
    names = ", ".join(value.path.split(".", 1)[1] for value in weights)
    words = f"{names}, which its own code hands {call.name} through operators no dump records"
    return answer_at(call, "weights", words, enclosing.module)


def extra_before(analysis: PairAnalysis, call: Call) -> Diagnosis | None:
    """The latest API call before ``call``, in its phase, that this run alone makes and that may change a value
    (not one handing its input on): what it returned may reach ``call`` through operators no dump records
    (a sequence flipped before a recurrent layer, at level L1)."""
    for other in reversed(analysis.pairing.extra):
        if other.order >= call.order or other.kind != "api" or other.phase != call.phase:
            continue
        if changes_nothing(analysis, other):
            continue
        words = f"{_extra_words(analysis, other, call)}, before {call.name}: what it returns reaches it through "
        found = answer_at(other, "calls", words + "operators no dump records", caller(other), other.name)
        found.confidence = "medium"
        return found
    return None


def _handed_on(analysis: PairAnalysis, call: Call, value: Value) -> bool:
    """The value is the output of an earlier paired call of this run whose outputs already differ."""
    makers = analysis.producers("ours", value, call.order)
    return bool(makers) and makers[-1].order not in analysis.extra and analysis.outputs_differ(makers[-1])


def dtype_words(call: Call, partner: Call | None) -> str:
    ours = call.tensors("outputs")[0].dtype if call.tensors("outputs") else "?"
    theirs = partner.tensors("outputs")[0].dtype if partner is not None and partner.tensors("outputs") else "?"
    return f"it returns {ours} where the benchmark's returns {theirs}: it computes in another precision (autocast?)"


def _class_change(call: Call, partner: Call | None) -> str:
    if partner is not None and call.module_class and partner.module_class and call.module_class != partner.module_class:
        return f"{call.module} is a {call.module_class} here and a {partner.module_class} in the benchmark"
    return ""


def trace(analysis: PairAnalysis, call: Call, value: Value, threshold: float | None = None) -> Diagnosis | None:
    """Where a differing input came from: an extra call of ours (one that made it, or wrote it in place), or
    a missing call of the benchmark's. ``threshold`` (among rounding differences): an extra call standing in
    for a missing one counts only when their outputs differ by more than that."""
    partner = analysis.pairing.of(call)
    theirs = next((v for v in partner.inputs if v.path == value.path), None) if partner else None
    makers = analysis.producers("ours", value, call.order)
    extra = [maker for maker in makers if maker.order in analysis.extra and _nameable(analysis, maker)]
    writer = analysis.rewriter(value, theirs, call.order) if theirs is not None else None
    culprit = writer if writer is not None and writer.order in analysis.extra and _nameable(analysis, writer) else None
    culprit = culprit or (extra[-1] if extra else None)
    if culprit is not None:
        culprit = _start_of_extra(analysis, culprit)
        stand_in = analysis.pairing.substitute.get(culprit.order)
        in_place_for_not = stand_in is not None and _writes_in_place(culprit) and not _writes_in_place(stand_in)
        if stand_in is not None and threshold is not None and not in_place_for_not:
            if analysis.equivalent(culprit, stand_in, threshold):
                return None
        words = _extra_words(analysis, culprit, call)
        if stand_in is not None:
            words = f"it calls {api_kind(culprit.name)} where the benchmark calls {api_kind(stand_in.name)}"
        outer = analysis.outermost_alone(culprit, "ours")
        module = caller(outer)
        if outer is not culprit:
            words = join(words, f"within {outer.name}, which the benchmark does not call")
        elif module == OUTSIDE and culprit.phase != FORWARD:
            module = _hooked_module(analysis, culprit, call) or OUTSIDE
        return answer_at(culprit, "calls", words, module, culprit.name)
    if theirs is not None:
        made = analysis.producers("theirs", theirs, partner.order)
        missing = [maker for maker in made if maker.order in analysis.missing and _nameable(analysis, maker)]
        if missing:
            gone = missing[-1]
            return answer_at(gone, "calls", *_not_called(analysis, gone, call.module), gone.name)
    return None


def _start_of_extra(analysis: PairAnalysis, call: Call) -> Call:
    """Where a run of extra calls starts: from ``call`` back through the extra calls that made the value it works
    on, its first tensor (``(x - 0.5) / 0.25`` added to the data starts at the subtraction; ``mask.add_(eye)``
    is the write, whatever made its operand); for an extra call's backward entry, the forward call it is the
    backward of (a loss scaled, whose product only the backward reads)."""
    if call.kind == "api" and call.direction == BACKWARD:
        forward = analysis.forward_twin(call)
        if forward is not None and forward.order in analysis.extra:
            call = forward
    for _ in range(64):  # a run of extra calls is short; the bound keeps a hostile dump from looping long
        worked_on = call.tensors("inputs")[:1]  # the value it works on (an in-place write's own target)
        makers = [maker for value in worked_on for maker in analysis.producers("ours", value, call.order)[-1:]]
        if not makers or makers[0].order not in analysis.extra or makers[0].kind != "api":
            break
        if passes_input_on(makers[0]):
            break
        call = makers[0]
    return call


def _not_called(analysis: PairAnalysis, gone: Call, fallback: str | None) -> tuple[str, str | None]:
    """The words and the module for a call the benchmark makes and this run does not: named in the code that
    would call it, or that would call the outermost module around it this run does not call either."""
    outer = analysis.outermost_alone(gone, "theirs")
    words = f"this run does not call {gone.name}"
    if outer is not gone:
        words += f", nor {outer.name} around it"
    if outer.kind == "module":
        return words, caller(outer)
    return words, gone.module or fallback


def written_after(analysis: PairAnalysis, call: Call, values: list[Value]) -> Diagnosis | None:
    """An input made by no dumped call whose benchmark value an earlier call of this run was given: the
    tensor was written in place after that call started. Named: the outermost module around that call that
    ended before ``call`` (its own code, or code after it that no dump records, wrote it). In a dump of modules
    alone only: where API calls are dumped, the call that writes is itself recorded (and traced)."""
    partner = analysis.pairing.of(call)
    if partner is None or analysis.judged_kind != "module":
        return None
    theirs = {value.path: value for value in partner.inputs}
    for value in values:
        other = theirs.get(value.path)
        wanted = other.fingerprint() if other is not None and other.tensor else None
        if wanted is None or (other.stats is not None and other.stats[0] == other.stats[1]):
            continue  # a constant tensor (zeros, ones) is given to many calls alike
        given = [c for c in analysis.ours[: call.order] if any(v.fingerprint() == wanted for v in c.inputs)]
        if not given:
            continue
        holder = given[-1]
        while holder.parent:
            around = analysis.named(holder.parent)
            if around is None or around.order >= call.order:
                break
            holder = around
        words = (
            f"given {argument_name(value.path)} as the benchmark has it; it, or code after it that no dump "
            f"records, writes into it in place before {call.name}"
        )
        return answer_at(holder, "inplace", words, holder.module if holder.kind == "module" else caller(holder))
    return None


def _named_kinds(analysis: PairAnalysis) -> tuple[str, ...]:
    """The calls one run alone may be blamed for making: API calls, and modules in a dump of modules alone (a
    module's entry beside its API calls returns what they made, and the API is the maker named)."""
    return ("api",) if analysis.judged_kind == "api" else ("api", "module")


def _nameable(analysis: PairAnalysis, call: Call) -> bool:
    """A call one run alone makes that may be named for a value it made: an API call, or a module's forward
    in a dump of modules alone (a module's backward entry made by one run alone follows its forward's)."""
    if call.kind == "api":
        return True
    return call.kind == "module" and analysis.judged_kind == "module" and call.direction != BACKWARD


def caller(call: Call) -> str:
    """The module whose code makes the call: for an API call the module it ran in, for a module call the module
    around it (``OUTSIDE``: outside every module)."""
    if call.kind != "module":
        return call.module or OUTSIDE
    found = module_path(call.parent) if call.parent else None
    return found[0] if found else OUTSIDE


def skipped_module(analysis: PairAnalysis, call: Call) -> Diagnosis | None:
    """In a dump of modules alone: the latest forward module call before ``call`` that one run makes and the
    other does not (the outermost, when a module and those inside it are skipped together). A model that
    computes a module's work itself (its weights passed to a function) is seen no other way where no module
    is given the result."""
    if analysis.judged_kind != "module":
        return None
    partner = analysis.pairing.of(call)
    extra_names = {other.name for other in analysis.pairing.extra}
    for other in reversed(analysis.pairing.extra):
        if other.kind == "module" and other.phase == FORWARD and other.order < call.order:
            if other.parent not in extra_names:
                return answer_at(other, "calls", _extra_words(analysis, other, call), caller(other), other.name)
    missing_names = {other.name for other in analysis.pairing.missing}
    for other in reversed(analysis.pairing.missing):
        if other.kind == "module" and other.phase == FORWARD and partner is not None and other.order < partner.order:
            if other.parent not in missing_names:
                return answer_at(other, "calls", f"this run does not call {other.name}", caller(other), other.name)
    return None


def _hooked_module(analysis: PairAnalysis, culprit: Call, consumer: Call) -> str | None:
    """A call outside every module amid the backward is a hook's: it changed the gradient of the module whose
    backward entry returned what it made (a module's own backward hook); else of the module whose backward
    entry was given what it was given, when a submodule of that module received what it made (a hook or a
    custom backward on that module's output, inside its backward and before its submodules'). Else it is
    code outside every module (a tensor hook, a custom backward in the model's own code): None."""
    made = {value.fingerprint() for value in culprit.tensors("outputs")} - {None}
    given = {value.fingerprint() for value in culprit.tensors("inputs")} - {None}
    later = [
        other
        for other in analysis.ours
        if other.kind == "module" and other.direction == BACKWARD and other.order > culprit.order
    ]
    for other in later:
        if any(value.fingerprint() in made for value in other.outputs):
            return other.module
    inner = consumer.module
    for other in later:
        if other.module and inner and (inner == other.module or inner.startswith(other.module + ".")):
            if any(value.fingerprint() in given for value in other.inputs):
                return other.module
    return None


def one_sided_gradients(call: Call, one_sided: list[tuple[str, str]]) -> Diagnosis:
    """Parameters with a gradient in one run only (``one_sided``: each name, and the run that has it): frozen
    (``requires_grad`` off), detached from the loss, or left out of the graph in the other."""
    lacking = [name for name, holder in one_sided if holder == "theirs"]
    extra = [name for name, holder in one_sided if holder == "ours"]
    parts = []
    if lacking:
        parts.append(f"no gradient for {', '.join(lacking)} in this run (the benchmark has one)")
    if extra:
        parts.append(f"a gradient for {', '.join(extra)} in this run only")
    words = join(*parts, "a parameter frozen, detached from the loss, or left out of the graph in one run")
    return answer_at(call, "backward", words)


def gradient_entry_alone(analysis: PairAnalysis, before: Call | None) -> Diagnosis | None:
    """A module called in both runs whose parameter gradients only one run records (every parameter of it
    frozen in the other), when that comes before ``before``, the first call whose outputs differ."""
    partner = analysis.pairing.of(before) if before is not None else None
    theirs = [(c, "theirs") for c in analysis.pairing.missing if partner is None or c.order < partner.order]
    ours = [(c, "ours") for c in analysis.pairing.extra if before is None or c.order < before.order]
    for call, holder in theirs + ours:
        if call.kind == "grads" and analysis.called_in_both(call.module):
            return one_sided_gradients(call, [(value.path.split(".", 1)[-1], holder) for value in call.outputs])
    return None


def one_sided_anywhere(analysis: PairAnalysis) -> Diagnosis | None:
    """The first module of the step with a parameter that has a gradient in one run only (see
    ``one_sided_gradients``, ``gradient_entry_alone``): among rounding differences, asked once nothing in
    the forward stands out, since a forward fault (a bias left out) takes a gradient away too."""
    for call in analysis.ours:
        if call.kind == "grads" and call.order not in analysis.extra and analysis.pairing.of(call) is not None:
            one_sided = analysis.difference(call).one_sided
            if one_sided:
                return one_sided_gradients(call, one_sided)
    return gradient_entry_alone(analysis, None)


def gradient_made_by_extra(analysis: PairAnalysis, call: Call) -> Diagnosis | None:
    """A parameter gradient some extra call returned (a gradient hook's arithmetic): that call, in the module
    whose gradient it is."""
    for value in analysis.difference(call).outputs:
        # the gradient is final only after every hook on it ran, which may be after the module's backward entry
        makers = analysis.producers("ours", value, len(analysis.ours))
        after = analysis.first_backward
        extra = [m for m in makers if m.order in analysis.extra and m.kind == "api" and m.order > after]
        if extra:
            maker = extra[-1]
            words = (
                f"{_extra_words(analysis, maker, call)}, which returned the gradient of {value.path.split('.', 1)[1]}"
            )
            found = answer_at(maker, "calls", words, call.module, maker.name)
            found.phase = BACKWARD
            return found
    return None


def _inside(analysis: PairAnalysis, call: Call) -> Diagnosis | None:
    """A module whose inputs agree and outputs do not: an extra call inside it, else a missing one."""
    if call.kind != "module" or call.module is None:
        return None
    inside = call.module + "."

    def within(other: Call) -> bool:
        return other.module is not None and (other.module == call.module or other.module.startswith(inside))

    kinds = _named_kinds(analysis)
    for other in analysis.pairing.extra:
        if other.kind not in kinds or passes_input_on(other) or analysis.unspells(other) or other.order == call.order:
            continue
        if other.order < call.order and other.phase == call.phase and within(other):
            outer = analysis.outermost_alone(other, "ours")
            return answer_at(other, "calls", _extra_words(analysis, other, call), caller(outer), other.name)
    partner = analysis.pairing.of(call)
    for other in analysis.pairing.missing:
        if other.kind not in kinds or partner is None:
            continue
        if other.order < partner.order and other.phase == call.phase and within(other):
            words, module = _not_called(analysis, other, call.module)
            return answer_at(other, "calls", join(words, _class_change(call, partner)), module, other.name)
    return None


# APIs that hand on their input's elements in their order (the reference's module hooks add view_as calls)
_ORDER_KEEPING = frozenset(
    {"view", "view_as", "reshape", "reshape_as", "contiguous", "clone", "detach", "flatten", "unflatten",
     "squeeze", "unsqueeze", "to", "type_as"}
)  # fmt: skip


def passes_input_on(call: Call) -> bool:
    """An extra call that cannot have changed a value: an order-keeping API returning what it was given (the
    same dtype, count and statistics). A transpose keeps the statistics but not the order, so it is not one."""
    if call.kind != "api" or api_kind(call.name).rsplit(".", 1)[-1] not in _ORDER_KEEPING:
        return False
    given = {value.fingerprint() for value in call.tensors("inputs")}
    made = [value.fingerprint() for value in call.tensors("outputs")]
    return bool(made) and all(found is not None and found in given for found in made)


def changes_nothing(analysis: PairAnalysis, call: Call) -> bool:
    """An extra call that cannot have changed a value: it hands its input on, turns a mask into the
    benchmark's spelling of it, or stands in for the benchmark's call in its place with the same result
    (``Tensor.triu`` for ``torch.triu``)."""
    if passes_input_on(call) or analysis.unspells(call):
        return True
    stand_in = analysis.pairing.substitute.get(call.order)
    if stand_in is None or (_writes_in_place(call) and not _writes_in_place(stand_in)):
        return False  # mul_ for __mul__ returns the same, and writes into its input besides
    return analysis.equivalent(call, stand_in, 0.0)


def _writes_in_place(call: Call) -> bool:
    """An API that writes into its input: a method ending in ``_`` (``mul_``), or an augmented operator."""
    name = api_kind(call.name).rsplit(".", 1)[-1]
    if name.startswith("__") and name.endswith("__"):
        return name[2:3] == "i" and name not in ("__int__", "__index__", "__invert__", "__iter__")
    return name.endswith("_")


def _upstream(analysis: PairAnalysis, call: Call, limit: int = 64) -> Diagnosis | None:
    """What a summary could not show: inputs that look the same yet were made by a call given another
    argument, or by an extra call. Followed back through the producers of the call's inputs; of the calls
    that returned the same value, an extra one is the suspect (a tensor written in place, then handed on)."""
    seen: set[int] = set()
    pending = [call]
    while pending and len(seen) < limit:
        current = pending.pop(0)
        for value in current.tensors("inputs"):
            makers = analysis.producers("ours", value, current.order)
            extra = [m for m in makers if m.order in analysis.extra and m.kind == "api" and m.order not in seen]
            suspects = [m for m in extra if not changes_nothing(analysis, m)]
            for maker in suspects[-1:] or makers[-1:]:
                if maker.order in seen:
                    continue
                seen.add(maker.order)
                if maker.order in analysis.extra:
                    if maker.kind == "api" and not changes_nothing(analysis, maker):
                        return answer_at(maker, "calls", _extra_words(analysis, maker, call), maker.module, maker.name)
                    pending.append(maker)  # what it handed on was made further up
                    continue
                changed = analysis.difference(maker).changed_arguments
                if changed:
                    return answer_at(maker, "argument", arguments_words(changed), maker.module)
                pending.append(maker)
    return None


def arguments_words(arguments: list[tuple[str, Any, Any]]) -> str:
    return ", ".join(f"{argument_name(path)}: {ours!r} vs {theirs!r}" for path, ours, theirs in arguments[:3])


def _extra_words(analysis: PairAnalysis, first: Call, consumer: Call) -> str:
    """The extra calls from ``first`` to the call whose inputs they changed, counted by API."""
    counts: dict[str, int] = {}
    for order in range(first.order, max(consumer.order, first.order + 1)):
        if order in analysis.extra:
            kind = api_kind(analysis.ours[order].name)
            counts[kind] = counts.get(kind, 0) + 1
    extra = ", ".join(f"{kind} x{count}" if count > 1 else kind for kind, count in counts.items())
    return f"extra: {extra}"


def argument_name(path: str) -> str:
    """``input.kw.approximate`` -> ``approximate``; ``input.4`` -> ``argument 4``."""
    parts = path.split(".")
    if len(parts) >= 3 and parts[1] == "kw":
        return ".".join(parts[2:])
    if len(parts) >= 2 and parts[1].isdigit():
        return "argument " + ".".join(parts[1:])
    return path


def data_words(analysis: PairAnalysis, values: list[Value]) -> str:
    """The inputs no dumped call made; in a dump of modules alone (L0) they may also come from code between
    the modules."""
    words = f"{inputs_words(values)}, which no dumped call made"
    if analysis.judged_kind == "module":
        words += "; the data, or code outside every module that no dump records"
    return words


def inputs_words(values: list[Value]) -> str:
    return ", ".join(argument_name(value.path) for value in values[:3])


def param_error(analysis: PairAnalysis, call: Call) -> float | None:
    """The largest relative error of the call's differing parameters (or parameter inputs)."""
    partner = analysis.pairing.of(call)
    if partner is None:
        return None
    difference = analysis.difference(call)
    theirs = {value.path: value for value in (*partner.params, *partner.inputs)}
    errors = []
    for value in (*difference.params, *difference.inputs):
        other = theirs.get(value.path)
        errors.append(analysis.comparer.error(value, other) if other is not None else None)
    if not errors or any(error is None for error in errors):
        return None
    return max(errors)
