"""One dump folder as the diagnosis reads it: calls in the order they ran, each with its phase and module.

dump.json lists entries in the order they were first written, which is when a call ended; a module's entry
comes after the calls it made. A ``parameters_grad`` entry is listed beside its module's forward entry although
its gradients arrive in the backward, so it is moved to where they are whole: just after the module's last
backward entry, or, with none, after the backward's last call. The phase follows the reference's layout: backward
entries are the backward; forward calls after the step's last backward that run outside every module (parent
``optimizer`` in construct.json, or none) are the optimizer's; the rest is the forward.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

from msprobe.core.dump.entry_names import parse_entry
from msprobe.core.dump.reader import Dump

FORWARD, BACKWARD, OPTIMIZER = "forward", "backward", "optimizer"
PHASES = (FORWARD, BACKWARD, OPTIMIZER)

_STATS = ("Max", "Min", "Mean", "Norm")
_SECTIONS = (("input_args", "input"), ("input_kwargs", "input"), ("input", "input"), ("output", "output"))


@dataclass(slots=True)
class Value:
    """One recorded value: a tensor's summary, or a plain argument (number, text, None...)."""

    path: str  # "input.0", "input.weight", "output.0", "parameters.weight", "grad.weight"
    tensor: bool
    dtype: str | None = None
    shape: tuple | None = None
    stats: tuple | None = None  # Max, Min, Mean, Norm as floats (None where absent)
    checksum: str | None = None  # md5 or xor
    data_name: str | None = None
    literal: Any = None  # a plain argument's value
    requires_grad: bool | None = None
    # merged from the ranks of a sharded run with some statistics unknown (partial sums: only the mean is
    # known); those compare with nothing, rather than differ
    partly_known: bool = False
    _fingerprint: Any = field(default=False, repr=False, compare=False)

    @property
    def size(self) -> int:
        return math.prod(self.shape) if self.shape else 1

    @property
    def finite(self) -> bool:
        """No inf or nan among its statistics (a plain number: itself); unknown counts as finite."""
        if self.tensor:
            return self.stats is None or all(s is None or math.isfinite(s) for s in self.stats)
        number = self.literal[1] if isinstance(self.literal, tuple) and len(self.literal) == 2 else None
        return not (isinstance(number, float) and not math.isfinite(number))

    def fingerprint(self) -> tuple | None:
        """What tells this tensor's content from others' within one run: dtype, element count, and its statistics
        (else its checksum). Not the shape: a view or reshape (not dumped) passes the same values on in another
        shape."""
        if self._fingerprint is False:
            self._fingerprint = self._make_fingerprint()
        return self._fingerprint

    def _make_fingerprint(self) -> tuple | None:
        if not self.tensor:
            return None
        stats = self.stats
        if stats is not None and any(s is not None and math.isnan(s) for s in stats):  # nan equals nothing
            stats = tuple("nan" if s is not None and math.isnan(s) else s for s in stats)
        if stats is not None and any(s is not None for s in stats):
            # statistics alone: one dump may record a checksum for a tensor where it records none for the same
            # tensor elsewhere (a module's parameters in a tensor dump)
            return (self.dtype, self.size, stats)
        if self.checksum is None:
            return None
        return (self.dtype, self.size, self.checksum)


@dataclass
class Call:
    """One dump.json entry (or one module's parameter gradients) at its place in call order."""

    name: str
    kind: str  # "api", "module" or "grads"
    key: str  # what pairs calls across runs: the API and direction, or the module path and direction
    direction: str  # "forward" or "backward"
    module: str | None  # the module path it ran in (a module: its own path); None: outside every module
    parent: str | None  # construct.json's parent entry
    inputs: list[Value] = field(default_factory=list)
    outputs: list[Value] = field(default_factory=list)
    params: list[Value] = field(default_factory=list)
    phase: str = FORWARD
    order: int = 0
    module_class: str | None = None

    @property
    def label(self) -> str:
        return self.name

    def tensors(self, which: str = "inputs") -> list[Value]:
        return [value for value in getattr(self, which) if value.tensor]


def module_path(entry: str) -> tuple[str, str] | None:
    """``Module.blocks.0.fc.Linear.forward.0`` -> (``blocks.0.fc``, ``Linear``); None for an API entry."""
    parsed = parse_entry(entry)
    return (parsed.path, parsed.cls) if parsed is not None and parsed.is_module else None  # type: ignore[return-value]


def key_of(entry: str) -> str:
    """What pairs a call across runs: the API and direction (``Functional.linear.forward``), a module's path and
    direction (``blocks.0.fc.forward``: its class and the framework's prefix left out, so a swapped class or a
    MindSpore cell still pairs), a module's parameter gradients by path."""
    parsed = parse_entry(entry)
    if parsed is None:
        return f"{entry}.parameters_grad" if entry.endswith(".parameters_grad") else f"{entry}.forward"
    if parsed.is_module:
        return f"{parsed.path}.{parsed.direction or 'parameters_grad'}"
    return f"{parsed.kind}.{parsed.direction}"


def api_kind(entry: str) -> str:
    """``Functional.linear.3.forward`` -> ``Functional.linear``; a module entry -> its path."""
    parsed = parse_entry(entry)
    if parsed is None:
        return entry
    return parsed.path if parsed.is_module else parsed.kind  # type: ignore[return-value]


def _float(value: Any) -> float | None:
    if type(value) is float:
        return value
    if isinstance(value, (bool, int, float)):
        return float(value)
    if isinstance(value, str):
        try:
            return float(value)  # "inf", "nan" as some writers store them
        except ValueError:
            return None
    return None


def _value(path: str, leaf: Any) -> Value:
    if type(leaf) is dict and "dtype" in leaf:  # the commonest value: a tensor's summary
        get = leaf.get
        high, low, mean, norm = get("Max"), get("Min"), get("Mean"), get("Norm")
        stats = None
        if high is not None or low is not None or mean is not None or norm is not None:
            stats = (_float(high), _float(low), _float(mean), _float(norm))
        shape, checksum, name, grad = get("shape"), get("md5"), get("data_name"), get("requires_grad")
        return Value(
            path,
            True,
            _dtype(get("dtype")),
            tuple(shape) if type(shape) is list else None,
            stats,
            checksum if type(checksum) is str else None,
            name if type(name) is str else None,
            requires_grad=grad if type(grad) is bool else None,
            partly_known=stats is not None and None in stats and "merged" in leaf,
        )
    if isinstance(leaf, dict) and "type" in leaf:
        return Value(path, False, literal=_literal(leaf))
    return Value(path, False, literal=leaf)


_DTYPES: dict[Any, str] = {}


def _dtype(text: Any) -> str:
    """One name per dtype, whichever framework wrote it: ``torch.float32``, MindSpore's ``Float32`` -> float32."""
    found = _DTYPES.get(text)
    if found is None:
        name = str(text)
        found = name[len("torch.") :].lower() if name.startswith("torch.") else name.lower()
        if len(_DTYPES) < 256 and isinstance(text, str):  # a hostile dump's made-up names are not kept
            _DTYPES[text] = found
    return found


def _literal(leaf: dict) -> Any:
    """A plain argument as comparable data: its type and value (a device is not a value: runs on two devices
    pass different ones for the same computation)."""
    kind = leaf.get("type")
    if kind in ("torch.device", "device"):
        return ("device",)
    value = leaf.get("value")
    if isinstance(value, list):
        value = tuple(value)
    elif isinstance(value, dict):
        value = tuple(sorted((str(k), str(v)) for k, v in value.items()))
    return (kind, value)


def _walk(value: Any, path: str, out: list[Value], depth: int = 0) -> None:
    if depth > 32:
        return
    kind = type(value)
    if kind is list:
        for index, item in enumerate(value):
            if type(item) is dict and type(item.get("type")) is str:  # the commonest: a list of summaries
                out.append(_value(f"{path}.{index}", item))
            else:
                _walk(item, f"{path}.{index}", out, depth + 1)
    elif kind is dict:
        if type(value.get("type")) is str:
            out.append(_value(path, value))
            return
        for key, item in value.items():
            _walk(item, f"{path}.{key}", out, depth + 1)
    else:
        out.append(_value(path, value))


def _call(name: str, content: Any, parent: str | None, owner: dict[str, str]) -> Call:
    module = module_path(name)
    key = key_of(name)
    if name.endswith(".parameters_grad"):
        path = module[0] if module else name
        call = Call(name, "grads", key, BACKWARD, path, parent, module_class=module and module[1])
        for label, item in (content or {}).items() if isinstance(content, dict) else ():
            _walk(item[0] if isinstance(item, list) and len(item) == 1 else item, f"grad.{label}", call.outputs)
        return call
    direction = BACKWARD if key.endswith(".backward") else FORWARD
    if module is not None:
        call = Call(name, "module", key, direction, module[0], parent, module_class=module[1])
    else:
        call = Call(name, "api", key, direction, owner.get(parent or ""), parent)
    if isinstance(content, dict):
        for section, role in _SECTIONS:
            if section in content:
                _walk(content[section], role, call.inputs if role == "input" else call.outputs)
        parameters = content.get("parameters")
        if isinstance(parameters, dict):
            for label, item in parameters.items():
                call.params.append(_value(f"parameters.{label}", item))
    # the input section's positional and keyword parts are one list: keep their labels apart
    for value in call.inputs:
        if value.path.startswith("input.") and not value.path.split(".")[1].isdigit():
            value.path = "input.kw." + value.path[len("input.") :]
    return call


def calls_of(dump: Dump) -> list[Call]:
    """The dump's calls in the order they ran, phases set."""
    construct = dump.construct if isinstance(dump.construct, dict) else {}
    owner: dict[str, str] = {}
    for entry in set(construct.values()) | set(construct):
        if isinstance(entry, str):
            found = module_path(entry)
            if found:
                owner[entry] = found[0]
    calls: list[Call] = []
    grads: list[Call] = []
    for name, content in dump.data.items():
        parent = construct.get(name)
        call = _call(name, content, parent if isinstance(parent, str) else None, owner)
        (grads if call.kind == "grads" else calls).append(call)
    _adopt_backward(calls)
    _set_phases(calls)
    calls = _place_gradients(calls, grads)
    for index, call in enumerate(calls):
        call.order = index
    return calls


def _adopt_backward(calls: list[Call]) -> None:
    """A backward API recorded without a module ran in the module its forward ran in."""
    forward_module = {call.name: call.module for call in calls if call.kind == "api" and call.direction == FORWARD}
    for call in calls:
        if call.kind == "api" and call.direction == BACKWARD and call.module is None:
            call.module = forward_module.get(call.name[: -len("backward")] + "forward")


def _set_phases(calls: list[Call]) -> None:
    """Backward entries, and calls the backward made (a gradient hook's arithmetic); the optimizer's; the
    forward."""
    last_backward = max((i for i, call in enumerate(calls) if call.direction == BACKWARD), default=-1)
    first_backward = min((i for i, call in enumerate(calls) if call.direction == BACKWARD), default=-1)
    gradients: set[tuple] = set()
    optimizing = False
    for index, call in enumerate(calls):
        if call.direction == BACKWARD or _within_a_backward(call):
            call.phase = BACKWARD
        elif not optimizing and index > last_backward >= 0 and _on_gradients_alone(call, gradients):
            call.phase = BACKWARD  # a hook on a parameter's gradient, run as it is accumulated, after the last entry
        elif call.parent == "optimizer" or (index > last_backward >= 0 and call.kind == "api" and call.module is None):
            call.phase = OPTIMIZER
            optimizing = True
        elif first_backward < index < last_backward and _made_by_backward(calls, index, gradients):
            call.phase = BACKWARD
        else:
            call.phase = FORWARD
        if call.phase == BACKWARD:
            gradients.update(value.fingerprint() for value in call.outputs if value.tensor)


def _within_a_backward(call: Call) -> bool:
    """A call the backward made inside a module's backward (a custom autograd function's backward, a hook):
    construct.json gives it that module's backward entry as its parent."""
    found = parse_entry(call.parent) if call.parent else None
    return found is not None and found.is_module and found.direction == BACKWARD


def _loose(call: Call) -> bool:
    """A forward API call outside every module whose outputs need no gradient."""
    outputs = call.tensors("outputs")
    return (
        call.kind == "api"
        and call.direction == FORWARD
        and call.module is None
        and all(value.requires_grad is False for value in outputs)
    )


def _on_gradients_alone(call: Call, gradients: set[tuple]) -> bool:
    """A loose call given nothing but gradients the backward made (an optimizer is given its parameters and its
    state as well)."""
    inputs = call.tensors("inputs")
    return (
        call.parent != "optimizer"
        and _loose(call)
        and bool(inputs)
        and all(value.fingerprint() in gradients for value in inputs)
    )


def _made_by_backward(calls: list[Call], index: int, gradients: set[tuple]) -> bool:
    """A loose call amid the backward, outside every module: given a gradient a backward entry returned, or
    followed (past other loose calls) by a backward entry rather than by the next forward."""
    call = calls[index]
    if not _loose(call):
        return False
    if gradients and any(value.fingerprint() in gradients for value in call.inputs):
        return True
    following = next((later for later in calls[index + 1 :] if not _loose(later)), None)
    return following is not None and following.direction == BACKWARD


def _place_gradients(calls: list[Call], grads: list[Call]) -> list[Call]:
    if not grads:
        return calls
    by_module: dict[str, list[Call]] = {}
    for grad in grads:
        grad.phase = BACKWARD
        by_module.setdefault(grad.module or "", []).append(grad)
    # after the module's last backward: a module called several times in a step (microbatches accumulating,
    # a layer used twice) has its gradients whole only then
    last = {
        call.module: index for index, call in enumerate(calls) if call.kind == "module" and call.direction == BACKWARD
    }
    placed: list[Call] = []
    for index, call in enumerate(calls):
        placed.append(call)
        if call.kind == "module" and call.module in by_module and last.get(call.module) == index:
            placed.extend(by_module.pop(call.module))
    rest = [grad for group in by_module.values() for grad in group]
    if rest:
        last_backward = max((i for i, call in enumerate(placed) if call.phase == BACKWARD), default=len(placed) - 1)
        placed[last_backward + 1 : last_backward + 1] = rest
    return placed
