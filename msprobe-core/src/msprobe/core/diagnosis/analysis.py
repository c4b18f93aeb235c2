"""Two runs' calls of one step, paired, and what can be asked of them: what differs in a pair, which call made
a value (by its summary), which module owns a parameter, where a cast no dump records happened.

The thresholds the rules judge rounding by live here with the data they judge.
"""

from __future__ import annotations

import math
import re
from collections import defaultdict
from dataclasses import dataclass, field
from typing import Any

from msprobe.core.diagnosis.align import Pairing
from msprobe.core.diagnosis.calls import BACKWARD, FORWARD, OPTIMIZER, Call, Value, api_kind
from msprobe.core.diagnosis.values import ValueComparer

FAR_OFF = 10.0  # outputs this far off (relative), from inputs far closer, are no rounding
SYSTEMATIC = 3  # calls given cast inputs: from this many on, the casts are the run's precision, not a fault
ROUNDING = 0.05  # a first difference larger than this (relative) is no rounding, whatever follows it
AMPLIFICATION = 8.0  # a call whose error exceeds this many times the error it was given stands out
STANDOUT = 0.02  # ... and is at least this large (relative): below it nothing is out of proportion
# runs of other layouts (a sharded run and a golden run of fewer ranks) differ by the order of their sums: in
# float32 a few units in the last place, so an error this large (relative) and out of proportion is no such sum
LAYOUT_STANDOUT = 1e-4
# element-wise and normalizing kernels of two machines differ by a few units in the last place; this (relative)
# is a thousand float32 units: beyond it, such a call given the same inputs computes something else
ONE_CALL_ROUNDING = 1e-4


@dataclass
class Difference:
    """What differs between one paired call of the two runs."""

    arguments: list[tuple[str, Any, Any]] = field(default_factory=list)
    inputs: list[Value] = field(default_factory=list)  # ours
    params: list[Value] = field(default_factory=list)
    outputs: list[Value] = field(default_factory=list)
    input_error: float = 0.0
    output_error: float | None = 0.0
    # parameter gradients one run has and the other lacks (a parameter frozen, or cut from the graph): the
    # parameter's name and which run has it ("ours" or "theirs")
    one_sided: list[tuple[str, str]] = field(default_factory=list)

    @property
    def any(self) -> bool:
        return bool(self.arguments or self.inputs or self.params or self.outputs)

    @property
    def changed_arguments(self) -> list[tuple[str, Any, Any]]:
        """The non-tensor arguments both runs give, with other values (not one given by one run alone)."""
        return [a for a in self.arguments if a[1] is not None and a[2] is not None]


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
        self._holders = _holders(ours)  # a parameter's summary -> every module holding it (tied weights)
        self._gradient_owners = _owners(ours, gradients=True)
        self._forward_names: dict[str, Call] | None = None
        self._cast_sites: int | None = None
        self._updated: set[tuple] | None = None  # what the step's optimizer calls were given (see is_parameter)
        self._module_calls: dict[str | None, tuple[list[Call], int]] | None = None  # see called_in_both
        self._consumers: dict[tuple, list[Call]] | None = None  # a summary -> the calls given it (see meeting)
        self.met_again_at: list[Call] = []  # the calls whose outputs differ, when the runs meet again after all
        # the two runs were laid out otherwise (another tensor-parallel degree...): a sum may be taken in another
        # order anywhere, so a call of a kind that agreed elsewhere may still round otherwise
        self.other_layout = False
        # runs of other layouts whose forward calls compute as one process does (pipeline stages): a forward
        # difference with no call given bit-identical inputs to make it is no rounding
        self.exact_forward = False
        self.spelt: set[tuple] = set()  # this run's masks taken as the benchmark's (see masks_spelt_otherwise)
        # serving: each run's request and token counts, when one request was dumped from batches of other sizes
        self.batches: tuple[dict[str, Any], dict[str, Any]] | None = None
        self._by_name = {call.name: call for call in ours}
        self._theirs_by_name = {call.name: call for call in theirs}
        self.has_modules = any(call.kind == "module" for call in ours)
        self.containers = {call.parent for call in ours if call.kind == "module" and call.parent}
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
        analysis._by_name = analysis._theirs_by_name = {}
        analysis.containers = set()
        analysis._dump = dump
        return analysis

    def calls(self) -> list[Call]:
        """This run's calls in order (read now for dumps found identical whole)."""
        if not self.ours and getattr(self, "_dump", None) is not None:
            from msprobe.core.diagnosis.calls import calls_of

            self.ours = calls_of(self._dump)
        return self.ours

    # -- what differs ----------------------------------------------------------------------------------
    def named(self, name: str | None) -> Call | None:
        """This run's call of that entry name."""
        return self._by_name.get(name) if name is not None else None

    def difference(self, call: Call) -> Difference:
        found = self._differences.get(call.order)
        if found is None:
            found = self._differences[call.order] = self._compare(call, self.pairing.of(call))
        return found

    def _compare(self, ours: Call, theirs: Call) -> Difference:
        difference = Difference()
        # a backward entry records what the autograd node behind the output saw, which a different kernel
        # path (a contiguous or a strided operand) changes in shape and in number: its values are compared
        # where both runs have one, reshaped. A module's parameter gradients are no such record: a parameter
        # with a gradient in one run only (frozen in the other) is a difference
        lenient = ours.direction == BACKWARD and ours.kind != "grads"
        same = self.comparer.same_content if lenient else self.comparer.same
        error = self.comparer.error
        their_inputs = {value.path: value for value in theirs.inputs}
        for value in ours.inputs:
            other = their_inputs.get(value.path)
            if other is None and lenient:
                continue
            if other is None or not (same(value, other) or self._spelt_alike(value, other)):
                if value.tensor and (other is None or other.tensor):
                    difference.inputs.append(value)
                    measured = error(value, other) if other is not None else None
                    difference.input_error = max(difference.input_error, math.inf if measured is None else measured)
                elif other is None or not (_same_effect(value, other, ours) or self._batch_sized(value, other)):
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
            if other is None or not (same(value, other) or self._spelt_alike(value, other)):
                difference.outputs.append(value)
                measured = error(value, other) if other is not None else None
                worst = None if measured is None or worst is None else max(worst, measured)
        if ours.kind == "grads" and self.called_in_both(ours.module):
            # (a module one run alone calls, an expert routed no tokens, has a gradient in that run alone)
            our_paths = {value.path for value in ours.outputs}
            difference.one_sided = [(path.split(".", 1)[-1], "ours") for path in our_paths - their_outputs.keys()]
            difference.one_sided += [(path.split(".", 1)[-1], "theirs") for path in their_outputs.keys() - our_paths]
            difference.one_sided.sort()
        if len(their_outputs) != len(ours.outputs) and not difference.outputs and not lenient:
            difference.outputs.extend(ours.outputs[:1])
            worst = None
        if difference.one_sided:
            worst = math.inf  # no rounding gives a parameter a gradient in one run alone
        difference.output_error = worst
        if difference.inputs and not difference.outputs and _reordered(ours.inputs, theirs.inputs):
            difference.inputs.clear()  # operands in another order, the same result
        return difference

    def _batch_sized(self, ours: Value, theirs: Value) -> bool:
        """An integer argument that is each run's own count of requests, or of tokens, in the forward (a reshape
        to the batch's size): one request dumped from batches of other sizes passes other numbers alike."""
        if self.batches is None:
            return False
        mine, other = _shown(ours), _shown(theirs)
        if type(mine) is not int or type(other) is not int:
            return False
        our_batch, their_batch = self.batches
        return any(mine == our_batch.get(count) and other == their_batch.get(count) for count in ("requests", "tokens"))

    def _spelt_alike(self, ours: Value, theirs: Value) -> bool:
        return bool(self.spelt) and ours.fingerprint() in self.spelt and _boolean_for_additive(ours, theirs)

    def masks_spelt_otherwise(self, call: Call) -> set[tuple]:
        """The summaries of ``call``'s differing outputs (failing those, its differing inputs) when every one
        is a boolean mask where the benchmark's is an additive one, or the other way round; else none."""
        partner = self.pairing.of(call)
        if partner is None:
            return set()
        difference = self.difference(call)
        for values, theirs in ((difference.outputs, partner.outputs), (difference.inputs, partner.inputs)):
            by_path = {value.path: value for value in theirs}
            if values and all(_boolean_for_additive(value, by_path.get(value.path)) for value in values):
                return {value.fingerprint() for value in values} - {None}
        return set()

    def unspells(self, call: Call) -> bool:
        """An extra call of this run given a mask taken as the benchmark's that returns values the benchmark's
        run holds: it turns the mask into the other spelling (a boolean mask filled in with -inf)."""
        if not self.spelt or call.order not in self.extra:
            return False
        if not any(value.fingerprint() in self.spelt for value in call.tensors("inputs")):
            return False
        return self.makes_theirs(call)

    def given(self, fingerprints: set[tuple]) -> list[Call]:
        """The forward calls of this run given a value of one of these summaries."""
        if self._consumers is None:
            self._consumers = _consumers(self.ours)
        calls = {c.order: c for f in fingerprints for c in self._consumers.get(f, []) if c.phase == FORWARD}
        return [call for _, call in sorted(calls.items())]

    def makes_theirs(self, call: Call) -> bool:
        """Every output of this call is a value the benchmark's run holds."""
        made = [value.fingerprint() for value in call.tensors("outputs")]
        return bool(made) and all(found is not None and self._producers["theirs"].get(found) for found in made)

    def spell_alike(self, fingerprints: set[tuple]) -> None:
        """Take these masks of this run as the benchmark's other spelling of them: the differences are
        compared again."""
        self.spelt |= fingerprints
        self._differences.clear()
        self._cast_sites = None

    def called_in_both(self, module: str | None) -> bool:
        """The module's forward is called in both runs, as often."""
        if self._module_calls is None:
            ours_by_module: dict[str | None, list[Call]] = defaultdict(list)
            theirs_count: dict[str | None, int] = defaultdict(int)
            for call in self.ours:
                if call.kind == "module" and call.direction == FORWARD:
                    ours_by_module[call.module].append(call)
            for call in self.theirs:
                if call.kind == "module" and call.direction == FORWARD:
                    theirs_count[call.module] += 1
            self._module_calls = {path: (calls, theirs_count[path]) for path, calls in ours_by_module.items()}
        ours, theirs = self._module_calls.get(module, ([], 0))
        return bool(ours) and len(ours) == theirs and all(self.pairing.of(call) is not None for call in ours)

    def meeting(self, call: Call, depth: int = 0) -> set[int] | None:
        """Where the runs part ways at a forward call and meet again at once: each output of it that differs is
        given to later forward calls that all return what the benchmark's do, or to calls this run alone makes
        that meet again in turn (a few deep), or whose output is a value the benchmark's run holds (a boolean
        mask turned into the other run's ``-inf`` mask). The orders of the calls on the way, or None: an output
        no later call is given (the loss; a value only code no dump records reads) is no meeting, and neither
        is one a paired call computes on from with outputs that differ."""
        if depth > _MEETING_DEPTH or call.phase != FORWARD:
            return None
        extra = call.order in self.extra
        if not extra and not self.difference(call).inputs:
            return None  # a call that computes otherwise from the same inputs: its kernel differs, met again or not
        values = call.tensors("outputs") if extra else self.difference(call).outputs
        if self._consumers is None:
            self._consumers = _consumers(self.ours)
        on_the_way = {call.order}
        for value in values:
            fingerprint = value.fingerprint()
            if fingerprint is None:
                return None
            if extra and self._producers["theirs"].get(fingerprint):
                continue  # it makes what the other run has
            given = [c for c in self._consumers.get(fingerprint, []) if c.order > call.order and c.phase == FORWARD]
            if not given:
                return None
            for consumer in given:
                if consumer.order in self.extra:
                    further = self.meeting(consumer, depth + 1)
                    if further is None:
                        return None
                    on_the_way |= further
                elif not self._bit_identical_outputs(consumer):
                    return None  # a value computed on from it differs (or may: a statistic within tolerance)
        return on_the_way

    def _bit_identical_outputs(self, call: Call) -> bool:
        """Outputs the benchmark's equal with no tolerance: the same statistics to the last bit (a mean's
        tolerance for another summation order would let a small difference through)."""
        partner = self.pairing.of(call)
        if partner is None or self.difference(call).outputs:
            return False
        theirs = {value.path: value for value in partner.outputs}
        return all(
            value.path in theirs
            and value.stats == theirs[value.path].stats
            and value.checksum == theirs[value.path].checksum
            for value in call.tensors("outputs")
        )

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
        """Forward calls given inputs cast just before them (see ``cast_words``), or returning another dtype than
        the benchmark's from inputs of the same dtypes (autocast): many such calls are a precision the run
        computes in throughout, not a fault at one place."""
        if self._cast_sites is None:
            self._cast_sites = sum(
                1
                for call in self.ours
                if call.phase == FORWARD and call.order not in self.extra and self.difference(call).any
                and (cast_words(self, call) or returns_other_dtype(self, call))
            )  # fmt: skip
        return self._cast_sites

    def is_parameter(self, call: Call, value: Value) -> bool:
        """A parameter no module entry declares: an input that needs a gradient and that no call of either run
        made; where the step's optimizer calls are dumped, also one they are given (the output of a call no
        dump records, a reshape inside a library, needs a gradient and has no maker either, but no optimizer
        updates it). With modules in the dump, only that second kind."""
        if call.phase != FORWARD or not value.requires_grad:
            return False
        if self._updated is None:
            self._updated = {
                v.fingerprint() for c in self.ours if c.phase == OPTIMIZER for v in c.tensors("inputs")
            } - {None}
        if (self._updated or self.has_modules) and value.fingerprint() not in self._updated:
            # with modules in the dump, their parameters are known from them: what else the optimizer is given
            # belongs to a module never called (its weights handed to a functional call by its parent's code)
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
        """The innermost module around ``call`` whose inputs agree with the benchmark's: what ``call`` was given
        and no dumped call made came from that module's own code, or its own parameters (which may differ)."""
        parent = call.parent
        while parent:
            module = self._by_name.get(parent)
            if module is None or module.order in self.extra:
                return None
            difference = self.difference(module)
            if not difference.inputs and not difference.arguments:
                return module
            parent = module.parent
        return None

    def outermost_alone(self, call: Call, side: str = "ours") -> Call:
        """``call``, made by one run alone (``side``: "ours" for an extra call, "theirs" for a missing one), or
        the outermost module call around it that run alone makes too: a module the other run never calls,
        with everything it calls."""
        alone, named = (self.extra, self._by_name) if side == "ours" else (self.missing, self._theirs_by_name)
        while call.parent:
            around = named.get(call.parent)
            if around is None or around.order not in alone:
                break
            call = around
        return call

    def owner_of(self, value: Value, call: Call) -> str | None:
        """The module whose parameter ``value`` is: of the modules holding it (a tied weight has several), the
        one ``call`` runs in, or the innermost around it, else the first in call order."""
        holders = self._holders.get(value.fingerprint())
        if not holders:
            return None
        module = call.module or ""
        around = [h for h in holders if module == h or module.startswith(h + ".")]
        return max(around, key=len) if around else holders[0]

    def agreed_before(self, call: Call) -> bool:
        """An earlier call of the same kind (API, or module class) in the same phase returned bit-identical
        outputs: the two runs compute this kind alike, so a difference here is no machine's rounding. So does,
        for a call that multiplies by no matrix, an earlier forward call that does (a linear layer, a
        convolution, a matmul; a module's own code may run any kernel): matrix products are what differ first
        between machines (their sums are ordered by each kernel's blocking), and runs whose products agree
        compute alike. A later call of the same kind given bit-identical inputs and returning bit-identical
        outputs counts too. (A value made by code no dump records is not held to an earlier matrix product:
        that code may round otherwise where a recurrent kernel agreed.)"""
        kind = call.module_class if call.kind == "module" else call.key
        # a module that multiplies by a matrix itself is held to its own class: one kernel may agree (a fused
        # recurrent layer) where another does not
        by_matrix = call.phase == FORWARD and not _multiplies_by_matrix(call)
        for other in self.ours:
            if other.order == call.order:
                continue
            if other.phase != call.phase or other.order in self.extra or other.kind != call.kind:
                continue
            alike = (other.module_class if other.kind == "module" else other.key) == kind
            before = other.order < call.order
            if (alike or (before and by_matrix and _multiplies_by_matrix(other))) and not self.difference(other).any:
                return True
        return False

    def rounds_too_far(self, call: Call) -> bool:
        """A call that multiplies by no matrix, given bit-identical inputs and weights, whose float32 or float64
        outputs are further off than one such call's rounding takes them (``ONE_CALL_ROUNDING``). A matrix
        product may run in TF32 or bfloat16 on another machine, and a reduction to a few numbers may cancel, so
        only element-wise and normalizing calls are held to it: APIs whose output has an input's shape, and
        modules of those kinds with no module inside."""
        if call.phase != FORWARD or call.order in self.extra or _multiplies_by_matrix(call):
            return False  # an extra call has no partner to be compared with
        difference = self.difference(call)
        error = difference.output_error
        if error is None or error <= ONE_CALL_ROUNDING or difference.inputs or difference.params:
            return False
        if not all(value.dtype in ("float32", "float64") for value in difference.outputs):
            return False
        if call.kind == "module":
            return call.name not in self.containers and bool(_ELEMENTWISE_MODULE.search(call.module_class or ""))
        shapes = {value.shape for value in call.tensors("inputs")}
        return call.kind == "api" and all(value.shape in shapes for value in difference.outputs)

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

    def updated_module(self, call: Call) -> str | None:
        """For an optimizer call, the module whose parameter its update is of: the owner of its own inputs, or
        else of the nearest optimizer call before it that has one (an optimizer updates one parameter after
        another, and works on temporaries, such as Adam's denominator, between its calls on the parameter)."""
        for other in reversed(self.ours[: call.order + 1]):
            if other.phase != OPTIMIZER:
                return None
            found = self.owner(other)
            if found:
                return found
        return None


_MEETING_DEPTH = 3  # how many extra calls deep a difference may run before the runs meet again (see meeting)

# API calls that multiply matrices (the name after Functional., Torch., Tensor., Mint., ...; lower case)
_MATRIX_APIS = frozenset(
    {"linear", "bilinear", "dense", "conv1d", "conv2d", "conv3d", "conv_transpose1d", "conv_transpose2d",
     "conv_transpose3d", "matmul", "__matmul__", "__rmatmul__", "mm", "bmm", "addmm", "baddbmm", "addbmm",
     "einsum", "multi_head_attention_forward", "scaled_dot_product_attention", "lstm", "gru", "rnn_tanh",
     "rnn_relu", "lstm_cell", "gru_cell", "rnn_tanh_cell", "rnn_relu_cell"}
)  # fmt: skip


def _multiplies_by_matrix(call: Call) -> bool:
    """A call given a floating-point tensor that multiplies by a matrix: an API of ``_MATRIX_APIS``, or a module
    holding a parameter of two or more dimensions (a linear layer, a convolution, an attention or recurrent
    layer; an embedding is given integers, and looks rows up)."""
    if call.kind == "api":
        if api_kind(call.name).rsplit(".", 1)[-1].lower() not in _MATRIX_APIS:
            return False
    elif call.kind != "module" or not any(value.shape and len(value.shape) >= 2 for value in call.params):
        return False
    return any(value.dtype and value.dtype.startswith(("float", "bfloat")) for value in call.tensors("inputs"))


# module classes named for an element-wise or normalizing computation (LayerNorm, LlamaRMSNorm, GELU, ...)
_ELEMENTWISE_MODULE = re.compile(r"norm|gelu|relu|silu|swish|mish|sigmoid|tanh|softmax|activation", re.IGNORECASE)


# arguments that say where a result goes, not what it is
_STORAGE_ARGUMENTS = frozenset({"inplace", "non_blocking"})


def _same_effect(ours: Value, theirs: Value, call: Call) -> bool:
    """Two spellings of one argument that give the same result: ``inplace``, or a ``dim`` counted from the
    other end of the first tensor's dimensions (``dim=1`` and ``dim=-1`` on a matrix)."""
    parts = ours.path.split(".")
    name = parts[2] if len(parts) >= 3 and parts[1] == "kw" else None
    if name in _STORAGE_ARGUMENTS:
        return True
    if name != "dim":
        return False
    mine, other = _shown(ours), _shown(theirs)
    first = next((value for value in call.inputs if value.tensor and value.shape is not None), None)
    if first is None or not first.shape or type(mine) is not int or type(other) is not int:
        return False
    rank = len(first.shape)
    return -rank <= mine < rank and -rank <= other < rank and mine % rank == other % rank


def _shown(value: Value | None) -> Any:
    if value is None:
        return None
    if value.tensor:
        return f"{value.dtype}{list(value.shape or ())}"
    literal = value.literal
    return literal[1] if isinstance(literal, tuple) and len(literal) == 2 else literal


def _reordered(ours: list[Value], theirs: list[Value]) -> bool:
    """The same operands in another order. Where every tensor has a checksum, it counts too: statistics alone
    cannot tell a weight one unit in the last place off from the benchmark's."""
    with_sums = all(v.checksum is not None for v in (*ours, *theirs) if v.tensor)

    def key(value: Value) -> str:
        return repr((value.fingerprint() or value.literal, value.checksum if with_sums else None))

    return sorted(map(key, ours)) == sorted(map(key, theirs))


def _consumers(calls: list[Call]) -> dict[tuple, list[Call]]:
    """Summary -> the calls given it, in call order."""
    found: dict[tuple, list[Call]] = {}
    for call in calls:
        for value in call.tensors("inputs"):
            fingerprint = value.fingerprint()
            if fingerprint is not None:
                found.setdefault(fingerprint, []).append(call)
    return found


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


def _holders(calls: list[Call]) -> dict[tuple, list[str]]:
    """A parameter's summary -> the modules that hold it, in call order (constants left out, as in _owners)."""
    holders: dict[tuple, list[str]] = {}
    for call in calls:
        if call.kind != "module" or not call.module:
            continue
        for value in call.params:
            fingerprint = value.fingerprint()
            constant = value.stats is not None and value.stats[0] == value.stats[1]
            if fingerprint is not None and not constant:
                found = holders.setdefault(fingerprint, [])
                if call.module not in found:
                    found.append(call.module)
    return holders


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


# an additive mask's "not attended": -inf, or the dtype's lowest number (HuggingFace's masks), far below this
_MASKED = -1e4


def _boolean_for_additive(ours: Value, theirs: Value | None) -> bool:
    """A boolean mask where the other run holds an additive one of its shape (0 where attended, -inf or a large
    negative number where not), as far as a summary shows: the same mask, perhaps, spelt another way."""
    if theirs is None or not (ours.tensor and theirs.tensor) or ours.shape != theirs.shape:
        return False
    if (ours.dtype == "bool") == (theirs.dtype == "bool"):
        return False
    additive = theirs if ours.dtype == "bool" else ours
    if not (additive.dtype or "").startswith(("float", "bfloat")) or not additive.stats:
        return False
    maximum, minimum = additive.stats[0], additive.stats[1]
    return maximum == 0 and minimum is not None and minimum <= _MASKED


def cast_words(analysis: PairAnalysis, call: Call) -> str:
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


def returns_other_dtype(analysis: PairAnalysis, call: Call) -> bool:
    partner = analysis.pairing.of(call)
    if partner is None:
        return False
    mine, theirs = call.tensors("inputs"), partner.tensors("inputs")
    if [v.dtype for v in mine] != [v.dtype for v in theirs]:
        return False
    return [v.dtype for v in call.tensors("outputs")] != [v.dtype for v in partner.tensors("outputs")]
