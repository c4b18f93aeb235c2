"""The rules that decide where two runs of one step part ways, and why.

Exact first. Calls are walked in the order they ran; the first paired call whose outputs are not bit-identical
to the benchmark's is where a difference shows (everything before it agrees, so no tolerance is needed). Why
it differs is read from what it was given:

- a non-tensor argument differs: that argument;
- a parameter differs (a module's ``parameters``, or an input no call produced that needs a gradient): the
  weights of the module that owns it;
- an input differs that an extra call of this run produced (traced through the values, by their summaries):
  the extra call, the first of a chain; one the benchmark's missing call produced: that call;
- an input differs that no call produced: the data;
- nothing it was given differs: the computation itself.

A difference in the backward, with the forward identical, is the backward's; one after the backward, outside
every module, is the optimizer's. When every output agrees (an operand order, a different but equivalent
call), the runs do not part ways, whatever else differs.

Noise. When the first difference is a computation differing by a rounding-sized amount and the runs then
differ everywhere (other hardware, other precision), the first difference is not the answer. The calls are
walked again: a difference that no rounding explains (an argument, a weight, the data, an extra or missing
call) is still exact evidence; otherwise the call whose error is out of proportion to the error of what it
was given is named, with how sure that is, and "uncertain" when nothing stands out.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

from msprobe.core.diagnosis.align import Pairing
from msprobe.core.diagnosis.answer import DIVERGENCE, NONE, UNCERTAIN, Diagnosis
from msprobe.core.diagnosis.calls import BACKWARD, FORWARD, OPTIMIZER, Call, Value, api_kind
from msprobe.core.diagnosis.nonfinite import makes_nonfinite
from msprobe.core.diagnosis.values import ValueComparer

FAR_OFF = 10.0  # outputs this far off (relative), from inputs far closer, are no rounding
SYSTEMATIC = 3  # calls given cast inputs: from this many on, the casts are the run's precision, not a fault
ROUNDING = 0.05  # a first difference larger than this (relative) is no rounding, whatever follows it
AMPLIFICATION = 8.0  # a call whose error exceeds this many times the error it was given stands out
STANDOUT = 0.02  # ... and is at least this large (relative): below it nothing is out of proportion


@dataclass
class Difference:
    """What differs between one paired call of the two runs."""

    arguments: list[tuple[str, Any, Any]] = field(default_factory=list)
    inputs: list[Value] = field(default_factory=list)  # ours
    params: list[Value] = field(default_factory=list)
    outputs: list[Value] = field(default_factory=list)
    input_error: float = 0.0
    output_error: float | None = 0.0

    @property
    def any(self) -> bool:
        return bool(self.arguments or self.inputs or self.params or self.outputs)


class PairAnalysis:
    """Two runs' calls of one step and rank, paired, with what differs in each pair."""

    def __init__(self, ours: list[Call], theirs: list[Call], pairing: Pairing, comparer: ValueComparer):
        self.ours, self.theirs, self.pairing, self.comparer = ours, theirs, pairing, comparer
        self.extra = {call.order for call in pairing.extra}
        self.missing = {call.order for call in pairing.missing}
        self.unpaired = len(self.extra) + len(self.missing)
        self._differences: dict[int, Difference] = {}
        self._producers = {"ours": _producers(ours), "theirs": _producers(theirs)}
        self.owners = _owners(ours, gradients=False)  # a parameter's summary -> its module
        self._gradient_owners = _owners(ours, gradients=True)
        self._forward_names: dict[str, Call] | None = None
        self._cast_sites: int | None = None
        self._by_name = {call.name: call for call in ours}
        self.has_modules = any(call.kind == "module" for call in ours)
        # the calls whose errors are weighed against each other: the APIs, or the modules of a dump without any
        self.judged_kind = "api" if any(c.kind == "api" and c.phase == FORWARD for c in ours) else "module"
        self.first_backward = next((call.order for call in ours if call.phase == BACKWARD), len(ours))

    @classmethod
    def identical(cls, dump: Any) -> PairAnalysis:
        """Two dumps found equal entry for entry without reading their calls: nothing differs, nothing pairs
        apart; the calls are read only if asked for (``calls``)."""
        analysis = cls.__new__(cls)
        analysis.ours, analysis.theirs, analysis.pairing = [], [], Pairing()
        analysis.extra, analysis.missing, analysis.unpaired = set(), set(), 0
        analysis._dump = dump
        return analysis

    def calls(self) -> list[Call]:
        """This run's calls in order (read now for dumps found identical whole)."""
        if not self.ours and getattr(self, "_dump", None) is not None:
            from msprobe.core.diagnosis.calls import calls_of

            self.ours = calls_of(self._dump)
        return self.ours

    # -- what differs ----------------------------------------------------------------------------------
    def difference(self, call: Call) -> Difference:
        found = self._differences.get(call.order)
        if found is None:
            found = self._differences[call.order] = self._compare(call, self.pairing.of(call))
        return found

    def _compare(self, ours: Call, theirs: Call) -> Difference:
        difference = Difference()
        # a backward entry records what the autograd node behind the output saw, which a different kernel
        # path (a contiguous or a strided operand) changes in shape and in number: its values are compared
        # where both runs have one, reshaped
        lenient = ours.direction == BACKWARD
        same = self.comparer.same_content if lenient else self.comparer.same
        error = self.comparer.error
        their_inputs = {value.path: value for value in theirs.inputs}
        for value in ours.inputs:
            other = their_inputs.get(value.path)
            if other is None and lenient:
                continue
            if other is None or not same(value, other):
                if value.tensor and (other is None or other.tensor):
                    difference.inputs.append(value)
                    measured = error(value, other) if other is not None else None
                    difference.input_error = max(difference.input_error, math.inf if measured is None else measured)
                else:
                    difference.arguments.append((value.path, _shown(value), _shown(other)))
        for path in their_inputs.keys() - {value.path for value in ours.inputs}:
            if not lenient:
                difference.arguments.append((path, None, _shown(their_inputs[path])))
        their_params = {value.path: value for value in theirs.params}
        by_order = len(ours.params) == len(theirs.params)  # across frameworks: gamma and beta for weight and bias
        for position, value in enumerate(ours.params):
            other = their_params.get(value.path) or (theirs.params[position] if by_order else None)
            if other is None or not same(value, other):
                difference.params.append(value)
                measured = error(value, other) if other is not None else None
                difference.input_error = max(difference.input_error, math.inf if measured is None else measured)
        their_outputs = {value.path: value for value in theirs.outputs}
        worst: float | None = 0.0
        for value in ours.outputs:
            other = their_outputs.get(value.path)
            if other is None and lenient:
                continue
            if other is None or not same(value, other):
                difference.outputs.append(value)
                measured = error(value, other) if other is not None else None
                worst = None if measured is None or worst is None else max(worst, measured)
        if len(their_outputs) != len(ours.outputs) and not difference.outputs and not lenient:
            difference.outputs.extend(ours.outputs[:1])
            worst = None
        difference.output_error = worst
        if difference.inputs and not difference.outputs and _reordered(ours.inputs, theirs.inputs):
            difference.inputs.clear()  # operands in another order, the same result
        return difference

    def outputs_differ(self, call: Call) -> bool:
        return call.order not in self.extra and bool(self.difference(call).outputs)

    # -- where values came from ----------------------------------------------------------------------------
    def producers(self, side: str, value: Value, before: int) -> list[Call]:
        """The calls before ``before`` whose output has this value's summary, in call order."""
        fingerprint = value.fingerprint()
        if fingerprint is None:
            return []
        return [call for call in self._producers[side].get(fingerprint, []) if call.order < before]

    def rewriter(self, ours: Value, theirs: Value, before: int) -> Call | None:
        """A call of ours, before ``before``, that was given the benchmark's value and returned ours: it turned
        one into the other (in place, typically)."""
        wanted, made = theirs.fingerprint(), ours.fingerprint()
        if wanted is None or made is None:
            return None
        for call in reversed(self._producers["ours"].get(made, [])):
            if call.order < before and any(value.fingerprint() == wanted for value in call.inputs):
                return call
        return None

    def equivalent(self, ours: Call, theirs: Call, threshold: float) -> bool:
        """Two different calls in the same place whose outputs differ no more than what they were given does
        explain (and at most ``threshold`` beyond it)."""

        def worst(mine: list[Value], other: list[Value]) -> float | None:
            by_path = {value.path: value for value in other}
            errors = [self.comparer.error(v, by_path[v.path]) if v.path in by_path else None for v in mine if v.tensor]
            return None if any(e is None for e in errors) else max(errors, default=0.0)

        if ours.direction == BACKWARD:  # gradients amplify rounding as a matter of course: judge the forward
            forward = self.forward_twin(ours)
            stand_in = self.pairing.substitute.get(forward.order) if forward is not None else None
            return stand_in is not None and self.equivalent(forward, stand_in, threshold)
        given, made = worst(ours.inputs, theirs.inputs), worst(ours.outputs, theirs.outputs)
        if given is None or made is None:
            return False
        return made <= max(threshold, AMPLIFICATION * given)

    def forward_twin(self, call: Call) -> Call | None:
        """The forward entry of a backward entry's call."""
        if self._forward_names is None:
            self._forward_names = {c.name: c for c in self.ours if c.direction == FORWARD}
        return self._forward_names.get(call.name[: -len("backward")] + "forward")

    def cast_sites(self) -> int:
        """Forward calls given inputs cast just before them (see ``_cast``), or returning another dtype than
        the benchmark's from inputs of the same dtypes (autocast): many such calls are a precision the run
        computes in throughout, not a fault at one place."""
        if self._cast_sites is None:
            self._cast_sites = sum(
                1
                for call in self.ours
                if call.phase == FORWARD and call.order not in self.extra and self.difference(call).any
                and (_cast(self, call) or _returns_other_dtype(self, call))
            )  # fmt: skip
        return self._cast_sites

    def is_parameter(self, call: Call, value: Value) -> bool:
        """Without modules in the dump (level L1), a parameter is an input that needs a gradient and that no
        call of either run made."""
        if self.has_modules or call.phase != FORWARD or not value.requires_grad:
            return False
        return self.made_by_no_call(call, value)

    def made_by_no_call(self, call: Call, value: Value) -> bool:
        """No earlier call of either run returned this input (or the benchmark's at its place)."""
        if self.producers("ours", value, call.order):
            return False
        partner = self.pairing.of(call)
        theirs = next((v for v in partner.inputs if v.path == value.path), None) if partner else None
        return theirs is not None and not self.producers("theirs", theirs, partner.order)

    def collective_before(self, call: Call, values: list[Value]) -> Call | None:
        """The latest collective before ``call`` that wrote in place into a tensor like one of ``values``
        (an all_reduce of gradients): what it received from other ranks is where they came from."""
        sizes = {(value.dtype, value.size) for value in values}
        for other in reversed(self.ours[: call.order]):
            if other.kind == "api" and other.name.startswith("Distributed."):
                if any((value.dtype, value.size) in sizes for value in other.tensors("inputs")):
                    return other
        return None

    def enclosing(self, call: Call) -> Call | None:
        """The innermost module around ``call`` whose inputs and parameters agree with the benchmark's."""
        parent = call.parent
        while parent:
            module = self._by_name.get(parent)
            if module is None or module.order in self.extra:
                return None
            difference = self.difference(module)
            if not difference.inputs and not difference.params and not difference.arguments:
                return module
            parent = module.parent
        return None

    def agreed_before(self, call: Call) -> bool:
        """An earlier call of the same kind (API, or module class) in the same phase returned bit-identical
        outputs: the two runs compute this kind alike, so a difference here is no machine's rounding."""
        kind = call.module_class if call.kind == "module" else call.key
        for other in self.ours:
            if other.order >= call.order:
                return False
            if other.phase != call.phase or other.order in self.extra or other.kind != call.kind:
                continue
            if (other.module_class if other.kind == "module" else other.key) == kind and not self.difference(other).any:
                return True
        return False

    def is_data(self, call: Call, value: Value) -> bool:
        """An input no call of either run made, that is no parameter and needs no gradient: the data."""
        if call.phase != FORWARD or value.requires_grad or self.owners.get(value.fingerprint()):
            return False
        return self.made_by_no_call(call, value)

    def owner(self, call: Call) -> str | None:
        """The module whose parameter (or parameter gradient) one of the call's inputs is."""
        for value in call.tensors("inputs"):
            fingerprint = value.fingerprint()
            found = self.owners.get(fingerprint) or self._gradient_owners.get(fingerprint)
            if found:
                return found
        return None


def _shown(value: Value | None) -> Any:
    if value is None:
        return None
    if value.tensor:
        return f"{value.dtype}{list(value.shape or ())}"
    literal = value.literal
    return literal[1] if isinstance(literal, tuple) and len(literal) == 2 else literal


def _reordered(ours: list[Value], theirs: list[Value]) -> bool:
    mine = sorted(repr(v.fingerprint() or v.literal) for v in ours)
    other = sorted(repr(v.fingerprint() or v.literal) for v in theirs)
    return mine == other


def _producers(calls: list[Call]) -> dict[tuple, list[Call]]:
    """Summary -> the calls that output it, in call order; an API is preferred to the module that returns the
    same tensor after it (the module's entry is written later, the API made the value)."""
    found: dict[tuple, list[Call]] = {}
    for call in calls:
        for value in call.outputs:
            fingerprint = value.fingerprint()
            if fingerprint is None:
                continue
            makers = found.setdefault(fingerprint, [])
            if (
                call.kind == "module"
                and makers
                and makers[-1].module
                and call.module
                and (makers[-1].module == call.module or makers[-1].module.startswith(call.module + "."))
            ):
                continue
            makers.append(call)
    return found


def _owners(calls: list[Call], gradients: bool) -> dict[tuple, str]:
    """A parameter's (``gradients``: a parameter gradient's) summary -> the first module, in call order, that
    holds it (a tied weight belongs to the module that uses it first). Constant tensors (a bias of zeros, a
    norm's weight of ones at the start) are left out: many modules hold the same."""
    owners: dict[tuple, str] = {}
    for call in calls:
        if gradients:
            values = call.outputs if call.kind == "grads" else []
        else:
            values = call.params if call.kind == "module" else []
        for value in values:
            fingerprint = value.fingerprint()
            constant = value.stats is not None and value.stats[0] == value.stats[1]
            if fingerprint is not None and not constant and call.module:
                owners.setdefault(fingerprint, call.module)
    return owners


# -- the exact rules ----------------------------------------------------------------------------------------


def first_difference(analysis: PairAnalysis) -> Call | None:
    for call in analysis.ours:
        if analysis.outputs_differ(call):
            return call
    return None


def explain(analysis: PairAnalysis, call: Call) -> Diagnosis:
    """Why ``call``, the first whose outputs differ, differs (see the module docstring)."""
    difference = analysis.difference(call)
    found = _because(analysis, call, difference)
    found.nonfinite = makes_nonfinite(call)
    found.error = _param_error(analysis, call) if found.cause == "weights" else difference.output_error
    return found


def _in_phase_words(found: Diagnosis) -> Diagnosis:
    """A difference born in the backward is the backward's (the forward agreed), one in the optimizer the
    optimizer step's; what differs there is kept in the detail. An extra or missing call stays itself."""
    if found.verdict != DIVERGENCE or found.cause in ("backward", "optimizer"):
        return found
    if found.cause == "weights" and found.phase != FORWARD:
        # weights that differ although the forward agreed: no forward call read the values that differ
        found.detail = _join(found.detail, f"first read in the {found.phase}: no forward call read what differs")
    elif found.phase == BACKWARD and found.cause != "calls":
        found.detail = _join(found.detail, CAUSE_WORDS.get(found.cause or "", ""))
        found.cause = "backward"
    elif found.phase == OPTIMIZER:
        found.detail = _join(found.detail, CAUSE_WORDS.get(found.cause or "", ""))
        found.cause = "optimizer"
    return found


CAUSE_WORDS = {"weights": "its parameters differ", "data": "its inputs differ", "computation": "",
               "argument": "", "calls": ""}  # fmt: skip


def _join(*parts: str) -> str:
    return "; ".join(part for part in parts if part)


def _answer(call: Call, cause: str, detail: str = "", module: str | None = None, name: str | None = None) -> Diagnosis:
    return Diagnosis(DIVERGENCE, phase=call.phase, module=module if module is not None else call.module,
                     api=name or call.name, cause=cause, detail=detail)  # fmt: skip


def _because(analysis: PairAnalysis, call: Call, difference: Difference) -> Diagnosis:
    module = call.module
    if call.phase == OPTIMIZER:
        module = analysis.owner(call) or module
    for value in difference.inputs:
        traced = _trace(analysis, call, value)
        if traced is not None:
            return traced
    partner = analysis.pairing.of(call)
    cast = _cast(analysis, call)
    if cast:
        return _answer(call, "calls", cast, module)
    changed = [
        (path, ours, theirs) for path, ours, theirs in difference.arguments if ours is not None and theirs is not None
    ]
    if changed:
        return _answer(call, "argument", _arguments(changed), module)
    if difference.params:
        names = ", ".join(value.path.split(".", 1)[1] for value in difference.params)
        return _answer(call, "weights", names, module)
    if difference.arguments:
        return _answer(call, "argument", _arguments(difference.arguments), module)
    if call.kind == "grads":
        names = ", ".join(value.path.split(".", 1)[1] for value in difference.outputs)
        made = _gradient_made_by_extra(analysis, call)
        return made or _answer(call, "computation", f"parameter gradients {names}", module)
    for value in difference.inputs:
        owner = analysis.owners.get(value.fingerprint())
        if owner or analysis.is_parameter(call, value):
            return _answer(call, "weights", _argument_name(value.path), owner or module)
    if difference.inputs:
        # made by no dumped call of either run: a collective that wrote other ranks' values into it, code no
        # dump records inside a module whose own inputs agree, or else the data
        received = analysis.collective_before(call, difference.inputs)
        if received is not None:
            words = f"{_inputs(difference.inputs)}: received from other ranks through {received.name}"
            return _answer(received, "data", words, received.module or module, received.name)
        enclosing = analysis.enclosing(call)
        if enclosing is not None:
            words = f"in its own code, between its submodules: {call.name} is given inputs no dumped call made"
            return _answer(enclosing, "computation", words, enclosing.module)
        return _answer(call, "data", _data_words(analysis, difference.inputs), module)
    hidden = _inside(analysis, call) or _upstream(analysis, call)
    if hidden is None and _returns_other_dtype(analysis, call):
        return _answer(call, "computation", _dtype_words(call, partner), module)
    return hidden or _answer(call, "computation", _class_change(call, partner), module)


def _cast(analysis: PairAnalysis, call: Call) -> str:
    """Inputs given in another dtype that no dumped call returned in it: a cast no tool records
    (Tensor.bfloat16, .half(), .to()) happened just before this call."""
    partner = analysis.pairing.of(call)
    if partner is None:
        return ""
    theirs = {value.path: value for value in partner.inputs}
    for value in analysis.difference(call).inputs:
        other = theirs.get(value.path)
        if other is not None and other.tensor and other.dtype != value.dtype:
            if not analysis.producers("ours", value, call.order):
                return f"its inputs are {value.dtype} where the benchmark's are {other.dtype}: a cast, not dumped"
    return ""


def _returns_other_dtype(analysis: PairAnalysis, call: Call) -> bool:
    partner = analysis.pairing.of(call)
    if partner is None:
        return False
    mine, theirs = call.tensors("inputs"), partner.tensors("inputs")
    if [v.dtype for v in mine] != [v.dtype for v in theirs]:
        return False
    return [v.dtype for v in call.tensors("outputs")] != [v.dtype for v in partner.tensors("outputs")]


def _dtype_words(call: Call, partner: Call | None) -> str:
    ours = call.tensors("outputs")[0].dtype if call.tensors("outputs") else "?"
    theirs = partner.tensors("outputs")[0].dtype if partner is not None and partner.tensors("outputs") else "?"
    return f"it returns {ours} where the benchmark's returns {theirs}: it computes in another precision (autocast?)"


def _class_change(call: Call, partner: Call | None) -> str:
    if partner is not None and call.module_class and partner.module_class and call.module_class != partner.module_class:
        return f"{call.module} is a {call.module_class} here and a {partner.module_class} in the benchmark"
    return ""


def _trace(analysis: PairAnalysis, call: Call, value: Value, threshold: float | None = None) -> Diagnosis | None:
    """Where a differing input came from: an extra call of ours (one that made it, or wrote it in place), or
    a missing call of the benchmark's. ``threshold`` (among rounding differences): an extra call standing in
    for a missing one counts only when their outputs differ by more than that."""
    partner = analysis.pairing.of(call)
    theirs = next((v for v in partner.inputs if v.path == value.path), None) if partner else None
    makers = analysis.producers("ours", value, call.order)
    extra = [maker for maker in makers if maker.order in analysis.extra and maker.kind == "api"]
    writer = analysis.rewriter(value, theirs, call.order) if theirs is not None else None
    culprit = writer if writer is not None and writer.order in analysis.extra and writer.kind == "api" else None
    culprit = culprit or (extra[-1] if extra else None)
    if culprit is not None:
        stand_in = analysis.pairing.substitute.get(culprit.order)
        if stand_in is not None and threshold is not None and analysis.equivalent(culprit, stand_in, threshold):
            return None
        words = _extra_words(analysis, culprit, call)
        if stand_in is not None:
            words = f"it calls {api_kind(culprit.name)} where the benchmark calls {api_kind(stand_in.name)}"
        module = (
            culprit.module if culprit.module or culprit.phase == FORWARD else _hooked_module(analysis, culprit, call)
        )
        return _answer(culprit, "calls", words, module, culprit.name)
    if theirs is not None:
        made = analysis.producers("theirs", theirs, partner.order)
        missing = [maker for maker in made if maker.order in analysis.missing and maker.kind == "api"]
        if missing:
            gone = missing[-1]
            return _answer(gone, "calls", f"this run does not call {gone.name}", gone.module or call.module, gone.name)
    return None


def _hooked_module(analysis: PairAnalysis, culprit: Call, consumer: Call) -> str | None:
    """A call outside every module amid the backward is a hook's: it changed the gradient of the module whose
    backward entry returned what it made (a module's own backward hook), else of the module that received
    what it made (a hook on a tensor)."""
    made = {value.fingerprint() for value in culprit.tensors("outputs")} - {None}
    for other in analysis.ours:
        if other.kind == "module" and other.direction == BACKWARD and other.order > culprit.order:
            if any(value.fingerprint() in made for value in other.outputs):
                return other.module
    return consumer.module


def _gradient_made_by_extra(analysis: PairAnalysis, call: Call) -> Diagnosis | None:
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
            found = _answer(maker, "calls", words, call.module, maker.name)
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

    for other in analysis.pairing.extra:
        if other.kind == "api" and other.order < call.order and other.phase == call.phase and within(other):
            return _answer(other, "calls", _extra_words(analysis, other, call), other.module, other.name)
    partner = analysis.pairing.of(call)
    for other in analysis.pairing.missing:
        if other.kind != "api" or partner is None:
            continue
        if other.order < partner.order and other.phase == call.phase and within(other):
            detail = f"this run does not call {other.name}"
            return _answer(other, "calls", _join(detail, _class_change(call, partner)), other.module, other.name)
    return None


def _upstream(analysis: PairAnalysis, call: Call, limit: int = 64) -> Diagnosis | None:
    """What a summary could not show: inputs that look the same yet were made by a call given another
    argument, or by an extra call. Followed back through the producers of the call's inputs."""
    seen: set[int] = set()
    pending = [call]
    while pending and len(seen) < limit:
        current = pending.pop(0)
        for value in current.tensors("inputs"):
            for maker in analysis.producers("ours", value, current.order)[-1:]:
                if maker.order in seen:
                    continue
                seen.add(maker.order)
                if maker.order in analysis.extra and maker.kind == "api":
                    return _answer(maker, "calls", _extra_words(analysis, maker, call), maker.module, maker.name)
                changed = [a for a in analysis.difference(maker).arguments if a[1] is not None and a[2] is not None]
                if changed:
                    return _answer(maker, "argument", _arguments(changed), maker.module)
                pending.append(maker)
    return None


def _arguments(arguments: list[tuple[str, Any, Any]]) -> str:
    return ", ".join(f"{_argument_name(path)}: {ours!r} vs {theirs!r}" for path, ours, theirs in arguments[:3])


def _extra_words(analysis: PairAnalysis, first: Call, consumer: Call) -> str:
    """The extra calls from ``first`` to the call whose inputs they changed, counted by API."""
    counts: dict[str, int] = {}
    for order in range(first.order, max(consumer.order, first.order + 1)):
        if order in analysis.extra:
            kind = api_kind(analysis.ours[order].name)
            counts[kind] = counts.get(kind, 0) + 1
    extra = ", ".join(f"{kind} x{count}" if count > 1 else kind for kind, count in counts.items())
    return f"extra: {extra}"


def _argument_name(path: str) -> str:
    """``input.kw.approximate`` -> ``approximate``; ``input.4`` -> ``argument 4``."""
    parts = path.split(".")
    if len(parts) >= 3 and parts[1] == "kw":
        return ".".join(parts[2:])
    if len(parts) >= 2 and parts[1].isdigit():
        return "argument " + ".".join(parts[1:])
    return path


def _data_words(analysis: PairAnalysis, values: list[Value]) -> str:
    """The inputs no dumped call made; in a dump of modules alone (L0) they may also come from code between
    the modules."""
    words = f"{_inputs(values)}, which no dumped call made"
    if analysis.judged_kind == "module":
        words += "; the data, or code outside every module that no dump records"
    return words


def _inputs(values: list[Value]) -> str:
    return ", ".join(_argument_name(value.path) for value in values[:3])


# -- the whole pair ---------------------------------------------------------------------------------------------


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
    elif found.cause == "calls" and _cast(analysis, first) and analysis.cast_sites() >= SYSTEMATIC:
        found = noisy(analysis, first, settled)
    found.compared = compared
    return _in_phase_words(found)


def _no_divergence(analysis: PairAnalysis, compared: int) -> Diagnosis:
    return Diagnosis(NONE, detail=no_divergence_words(compared, analysis.unpaired), compared=compared)


def no_divergence_words(compared: int, unpaired: int) -> str:
    words = f"every output of the {compared} paired calls is bit-identical"
    if unpaired:
        words += f" ({unpaired} calls made by one run only change no value)"
    return words


def noise_floor(analysis: PairAnalysis) -> float:
    """What rounding alone does to an output here: the typical error of the forward calls given bit-identical
    inputs and returning different outputs (none: the lowest quarter of every forward call's error)."""
    fresh, every = [], []
    judged = analysis.judged_kind
    for call in analysis.ours:
        if call.phase != FORWARD or call.kind != judged or call.order in analysis.extra:
            continue
        difference = analysis.difference(call)
        error = difference.output_error
        if not difference.outputs or error is None or not math.isfinite(error):
            continue
        every.append(error)
        if not difference.inputs and not difference.params:
            fresh.append(error)
    chosen = sorted(fresh) or sorted(every)[: max(1, len(every) // 4)]
    return chosen[len(chosen) // 2] if chosen else 0.0


def noisy(analysis: PairAnalysis, first: Call, settled: bool = True) -> Diagnosis:
    """The runs differ by rounding from ``first`` on: name what rounding does not explain, or say uncertain.
    A cast is evidence, unless this run casts before many calls: that is the precision it runs in."""
    casts = analysis.cast_sites() < SYSTEMATIC
    floor = noise_floor(analysis)
    threshold = max(STANDOUT, AMPLIFICATION * floor)
    for call in analysis.ours:
        if call.order in analysis.extra or call.order < first.order or not analysis.difference(call).outputs:
            continue
        found = _evidence(analysis, call, threshold, settled, casts)
        if found is not None:
            found.confidence = "high"
            found.detail = _join(found.detail, f"beside rounding differences from {first.name} on")
            return found
    standout = _standout(analysis, first, threshold)
    if standout is not None:
        call, ratio = standout
        found = explain(analysis, call)
        found.cause = "computation"
        found.detail = _join(found.detail, f"its error is {_times(ratio)} the error of what it was given")
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
        found.detail = _join(found.detail, "checksums cannot tell rounding from a fault")
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
        owner = analysis.owners.get(value.fingerprint())
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
            found = _answer(call, "weights", _argument_name(value.path), owner or call.module)
            found.error = error
            found.nonfinite = not value.finite
            return found
    if makes_nonfinite(call) and partner is not None and all(v.finite for v in partner.outputs):
        return explain(analysis, call)
    if call.phase == FORWARD and _far_out_of_proportion(difference):
        return explain(analysis, call)
    # after a step already noisy, state carried over (a norm's running statistics) differs too: only data that
    # is not finite then counts
    leaves = [
        value
        for value in difference.inputs
        if analysis.is_data(call, value) and (settled or not value.finite) and _beyond(analysis, call, value, threshold)
    ]
    if leaves:
        return _answer(call, "data", _data_words(analysis, leaves), _module_of(analysis, call))
    changed = [a for a in difference.arguments if a[1] is not None and a[2] is not None]
    if changed:
        return _answer(call, "argument", _arguments(changed), _module_of(analysis, call))
    # among rounding differences, a backward's dtypes follow its forward's: only the forward's casts count
    cast = _cast(analysis, call) if casts and call.phase == FORWARD else ""
    if cast:
        return _answer(call, "calls", cast, _module_of(analysis, call))
    if casts and call.phase == FORWARD and _returns_other_dtype(analysis, call):
        return _answer(call, "computation", _dtype_words(call, partner), _module_of(analysis, call))
    for value in difference.inputs:
        other = theirs.get(value.path)
        error = analysis.comparer.error(value, other) if other is not None else None
        if error is not None and error <= threshold:
            continue
        traced = _trace(analysis, call, value, threshold)
        if traced is not None:
            return traced
    if call.kind == "grads":
        return _gradient_made_by_extra(analysis, call)
    return None


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
    an input no dumped call made, but only rounding apart, is an undumped computation's output, not new data."""
    partner = analysis.pairing.of(call)
    other = next((v for v in partner.inputs if v.path == value.path), None) if partner else None
    error = analysis.comparer.error(value, other) if other is not None else None
    return error is None or error > threshold


def _module_of(analysis: PairAnalysis, call: Call) -> str | None:
    return (analysis.owner(call) or call.module) if call.phase == OPTIMIZER else call.module


def _param_error(analysis: PairAnalysis, call: Call) -> float | None:
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
