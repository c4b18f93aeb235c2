"""The MindSpore dump hooks (PyNative): patched APIs (L1), cell hooks (L0), both (mix).

Forward entries come from the core patcher around the reference's API list
and from cell forward hooks. Backward entries: an API's arriving gradients
come from ``Tensor.register_hook`` on its outputs (attached when backward
starts) and its own input gradients from an ``ops.HookBackward`` identity
placed on each floating tensor input (never in in-place calls, and on Parameters only in calls that
cannot write, so optimizer assignments are untouched); a cell's the same
way, from its forward hooks.
MindSpore's own cell backward hooks are not used: they make a cell's outputs
views, on which MindSpore refuses in-place ops the training code may apply.
Every piece of tool code runs inside ``try``: a failure is logged once per
API and the training goes on.
"""

from __future__ import annotations

import contextlib
import functools
import importlib
import importlib.resources
import os
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import yaml

import mindspore as ms
from mindspore import ops
from mindspore.ops import Primitive
from msprobe.core.api_patch import ApiPatcher, resolve_attribute
from msprobe.core.dump.values import ValueEncoder
from msprobe.core.recording.collector import dump_task
from msprobe.core.recording.recorder import (
    DumpRecorder,
    ModuleHooks,
    WriteRule,
    each_model,
    in_place_by_name,
    module_label,
)
from msprobe.core.recording.session import TaskSession
from msprobe.mindspore.dump.tensors import TensorSummarizer, describe_object

NAMESPACES = {
    "ops": ("Functional", "mindspore.ops"),
    "tensor": ("Tensor", "mindspore.Tensor"),
    "mint.ops": ("Mint", "mindspore.mint"),
    "mint.nn.functional": ("MintFunctional", "mindspore.mint.nn.functional"),
    "communication.comm_func": ("Distributed", "mindspore.communication.comm_func"),
}
_TOOL_ROOT = str(Path(__file__).resolve().parents[2])


@functools.cache
def load_api_names() -> dict[str, tuple[str, ...]]:
    text = importlib.resources.files("msprobe.mindspore.dump").joinpath("api_names.yaml").read_text()
    return {namespace: tuple(names) for namespace, names in yaml.safe_load(text).items()}


def api_targets() -> list[tuple[Any, str, str]]:
    targets = []
    for namespace, names in load_api_names().items():
        prefix, module_name = NAMESPACES[namespace]
        try:
            root = ms.Tensor if namespace == "tensor" else importlib.import_module(module_name)
        except ImportError:
            continue
        for api in names:
            try:
                owner, attribute = resolve_attribute(root, api)
            except AttributeError:
                continue
            targets.append((owner, attribute, f"{prefix}.{api}"))
    return targets


def _find_class(*places: tuple[str, str]) -> Any:
    """A MindSpore class whose module moved between releases, or None."""
    for module_name, class_name in places:
        try:
            found = getattr(importlib.import_module(module_name), class_name, None)
        except ImportError:
            continue
        if found is not None:
            return found
    return None


def _jit_executor() -> Any:
    """MindSpore's class that runs jit-compiled functions and cells."""
    return _find_class(
        ("mindspore.graph.api", "_JitExecutor"),
        ("mindspore.common.api", "_JitExecutor"),
        ("mindspore.common.api", "_MindsporeFunctionExecutor"),
    )


def _pynative_executor() -> Any:
    """MindSpore's PyNative executor class, whose ``grad`` every ``ms.grad``, ``value_and_grad``,
    ``GradOperation``, ``vjp`` and ``TrainOneStepCell`` goes through to run backward."""
    return _find_class(("mindspore.graph.api", "_PyNativeExecutor"), ("mindspore.common.api", "_PyNativeExecutor"))


def _backward_start() -> list[tuple[Any, str, str]]:
    executor = _pynative_executor()
    return [(executor, "grad", "PyNative.grad")] if callable(getattr(executor, "grad", None)) else []


class _JitHook:
    """``Jit.{Cell class or function}.{n}.forward``: a jit-compiled cell or function dumped as one API.

    Inside the compiled graph no Python runs, so its inputs and outputs are
    what can be seen; the executor's ``__call__`` is wrapped while dumping.
    """

    def __init__(self, recorder: MindSporeDumpRecorder):
        self.recorder = recorder
        self.executor = _jit_executor()
        self.original: Callable | None = None

    def install(self) -> None:
        if self.executor is None or self.original is not None:
            return
        original = self.original = self.executor.__call__
        recorder = self.recorder

        @functools.wraps(original)
        def call(executor: Any, *args: Any, **kwargs: Any) -> Any:
            if recorder.state.busy:
                return original(executor, *args, **kwargs)
            owner = getattr(executor, "obj", None)
            if owner is not None and args and args[0] is owner:  # a jit construct: the cell comes first
                head, args, label = args[:1], args[1:], type(owner).__name__
            else:
                head, label = (), getattr(getattr(executor, "fn", None), "__name__", "function")

            def run(*inner: Any, **named: Any) -> Any:
                with recorder.original_primitives():  # the graph compiler needs the real primitives
                    return original(executor, *head, *inner, **named)

            return recorder.call_api(run, f"Jit.{label}", args, kwargs)

        self.executor.__call__ = call

    def remove(self) -> None:
        if self.original is not None:
            self.executor.__call__ = self.original
            self.original = None


def _is_jit(cell: Any) -> bool:
    """A cell whose construct is decorated with ``mindspore.jit``."""
    construct = getattr(type(cell), "construct", None)
    code = getattr(construct, "__code__", None)
    return hasattr(construct, "__wrapped__") and code is not None and f"mindspore{os.sep}" in code.co_filename


def _inside_jit(root: Any) -> set[int]:
    """ids of the cells that run inside some jit-compiled cell of ``root``."""
    inside: set[int] = set()
    for _name, cell in root.cells_and_names():
        if id(cell) not in inside and _is_jit(cell):
            inside.update(id(child) for child_name, child in cell.cells_and_names() if child_name)
    return inside


def _inplace(key: str) -> bool:
    """Core's rule, and MindSpore's writing primitives (``assign``, ``scatter_update``)."""
    api = key.rsplit(".", 1)[-1]
    return in_place_by_name(key) or "assign" in api or api == "scatter_update"


_WRITING_WORDS = ("assign", "scatter", "inplace", "update")


def _writes_by_name(key: str) -> bool:
    """In-place APIs and primitives, jit graphs, collectives: after them no cached statistic can be trusted."""
    return _inplace(key) or key.startswith(("Jit.", "Distributed.")) or any(w in key.lower() for w in _WRITING_WORDS)


WRITES_IN_PLACE = WriteRule(_writes_by_name)


_NO_DATA_WRITTEN = {"requires_grad_"}
_IN_PLACE_OPERATORS = [
    f"__i{op}__" for op in ("add", "sub", "mul", "truediv", "floordiv", "mod", "pow", "and", "or", "xor")
]


def _undumped_writers(level: str) -> list[tuple[Any, str, str]]:
    """What writes tensors without an entry at this level: unlisted in-place Tensor methods; at L0 the listed ones too.

    A dump watches them only to empty its statistics cache.
    """
    listed = set(load_api_names()["tensor"])
    names = [name for name in dir(ms.Tensor) if name.endswith("_") and not name.startswith("_")]
    names += ["assign_value", "set_data", "__setitem__", *_IN_PLACE_OPERATORS]
    targets = [
        (ms.Tensor, name, f"Tensor.{name}")
        for name in names
        if name not in listed and name not in _NO_DATA_WRITTEN and callable(getattr(ms.Tensor, name, None))
    ]
    if level == "L0":
        targets += [target for target in api_targets() if WRITES_IN_PLACE.by_name(target[2])]
    return targets


class _Backward:
    """Gradients of one call, written once every hooked input has its gradient.

    ``expected`` inputs are hooked; the entry lists ``arity`` leaving
    gradients (None where an input has none). A call with no hooked input
    is written when its hooked outputs' gradients have arrived. ``parent``
    is the forward name of the cell the call ran in.
    """

    def __init__(self, recorder: MindSporeDumpRecorder, name: str, parent: str | None, expected: int, arity: int):
        self.recorder, self.name, self.parent = recorder, name, parent
        self.arriving: dict[int, Any] = {}
        self.leaving: dict[int, Any] = {}
        self.expected, self.arity = expected, arity
        self.outputs = self.hooked_outputs = 0
        self.written = False
        # a cell call: its forward name and the cells around it (its backward number is given when backward starts)
        self.cell: tuple[str, tuple[str, ...]] | None = None

    def on_output(self, index: int) -> Callable:
        def hook(grad: Any) -> None:
            if self.cell is not None and not self.arriving:
                self.recorder.collector.backward_numbering.start(self.cell[0])
            self.arriving[index] = grad
            if not self.expected and len(self.arriving) == self.hooked_outputs:
                self.write()

        return hook

    def on_input(self, index: int) -> Callable:
        def hook(grads: Any) -> None:
            self.leaving[index] = grads[0] if isinstance(grads, tuple) else grads
            if len(self.leaving) == self.expected:
                self.write()

        return hook

    def write(self) -> None:
        if self.written:
            return
        self.written = True
        arriving = [self.arriving.get(i) for i in range(self.outputs)]
        leaving = [self.leaving.get(i) for i in range(self.arity)]
        self.arriving, self.leaving = {}, {}  # the hooks outlive the write: they must not keep the gradients alive
        self.recorder.write_backward(self, arriving, leaving)


_MOST_UNHOOKED = 4096  # outputs waiting for backward to start before their hooks are attached all the same
_HOOK_PRIMITIVES = {"CellBackwardHook"}  # what MindSpore puts in a cell for its backward hooks: not the model's


class _HookedPrimitive:
    """Stands in for a cell's ``Primitive`` (``self.matmul = P.MatMul()``): each call is dumped as an API.

    A cell keeps its primitives as instance attributes (and in
    ``cell._primitives``); swapping both reaches every call of the cell.
    Attributes are passed through to the primitive, and the original goes
    back when dumping stops.
    """

    def __init__(self, primitive: Any, key: str, recorder: MindSporeDumpRecorder):
        self._primitive, self._key, self._recorder = primitive, key, recorder

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        recorder = self._recorder
        if recorder.state.busy:
            return self._primitive(*args, **kwargs)
        return recorder.call_api(self._primitive, self._key, args, kwargs)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._primitive, name)

    def __repr__(self) -> str:
        return f"msprobe-hooked {self._primitive!r}"


class _ApiCall:
    """One API call being recorded: what its forward entry needs once it returns."""

    __slots__ = ("args", "backward", "inputs", "keep_forward", "kwargs", "name")

    def __init__(self, name: str, keep_forward: bool):
        self.name, self.keep_forward = name, keep_forward
        self.inputs: Any = {}
        self.backward: _Backward | None = None
        self.args: tuple = ()
        self.kwargs: dict = {}


class MindSporeDumpRecorder(DumpRecorder):
    """TaskHooks for tasks statistics, tensor, structure and overflow_check on MindSpore."""

    def __init__(self, session: TaskSession):
        config = session.config
        # lazy reads, except for ``strict``, which raises the tool's errors from the call that met them, and for
        # the flight recorder, which looks at each call's values as it is recorded
        lazy = not config.strict and config.task != "flight_recorder"
        summarizer = TensorSummarizer(
            dump_task(config.task),
            config.summary_mode,
            caches=True,
            lazy=lazy,
            cut=session.tensor_cut,
            kv_cache=session.kv_cache,
        )
        encoder = ValueEncoder(ms.Tensor, summarizer, describe_object)
        super().__init__(session, summarizer, encoder, _TOOL_ROOT, WRITES_IN_PLACE)
        if summarizer.lazy:
            self.collector.deferred = summarizer.lazy_values  # entries are journaled once their tensors are read
            self.collector.settle_values = self._settle
            summarizer.on_settled = self.collector.entries_settled
            summarizer.when_full = self._settle
        self._late_decisions = summarizer.lazy and not summarizer.lazy_values
        self.patcher = ApiPatcher(self.call_api, api_targets)
        # writes without an entry still empty the statistics cache
        self.write_watch = ApiPatcher(self.note_write, lambda: _undumped_writers(self.level))
        self.pending: list[_Backward] = []
        self.jit = _JitHook(self)
        # outputs whose gradient hooks wait until backward starts (see _hook_outputs)
        self.backward_start = ApiPatcher(self._before_backward, _backward_start)
        self._unhooked: list[tuple[_Backward, int, Any]] = []
        self._swapped: list[tuple[dict, str, Any]] = []  # (where the cell keeps it, attribute, original primitive)
        self._hooked: dict[int, _HookedPrimitive] = {}

    # -- the step ---------------------------------------------------------------------
    def hook_apis(self) -> None:
        self.jit.install()
        if self.session.model is not None:
            self._hook_primitives()

    def started(self) -> None:
        self.backward_start.install()

    def stopping(self) -> None:
        self.hook_waiting_outputs()  # a backward after stop() still gives the entries of calls made before it
        self.backward_start.remove()
        self.jit.remove()
        for primitives, attribute, original in self._swapped:
            primitives[attribute] = original
        self._swapped.clear()
        self._hooked.clear()

    def stopped(self) -> None:
        self.summarizer.close()

    def finish_step(self) -> None:
        for record in self.pending:
            if not record.written and (record.arriving or record.leaving):
                record.write()  # gradients that reached only part of the inputs
        self.pending.clear()
        self._unhooked.clear()  # outputs of a forward that had no backward this step

    def _record(self, name: str, add: Callable[..., Any], /, *args: Any, holding: Any = (), **kwargs: Any) -> None:
        """``add(*args, **kwargs)`` an entry (with its stack), now or, for a lazy overflow check, at the next settle.

        The overflow check's decision reads the call's tensors; deferred, it
        costs no wait of its own (see TensorSummarizer.lazy). The stack is
        taken now, where the call was made. ``holding``: the tensors kept
        alive until then, counted against the batch's memory bound.
        """
        if not self._late_decisions:
            add(*args, **kwargs)
            return
        if "stack" in kwargs:
            stack = self.stack()
            kwargs["stack"] = lambda: stack

        def decide() -> None:
            try:
                add(*args, **kwargs)
            except Exception as exc:
                self.collector.report_failure(name, exc)

        self.summarizer.defer(decide, holding)

    def _record_forward(
        self, name: str, inputs: Any, output: Any, raw_inputs: tuple, parent: Any, parameters: dict | None = None
    ) -> None:
        self._record(
            name,
            self.collector.forward,
            name,
            inputs,
            output,
            parameters=parameters,
            raw_inputs=raw_inputs,
            stack=self.stack,
            parent=parent,
            holding=output,
        )

    def _settle(self) -> None:
        """Read the tensors waiting (see TensorSummarizer.lazy): before a write, and before entries are written."""
        with self.tool_running():  # the reads call MindSpore (astype for bfloat16): no entries of their own
            try:
                self.summarizer.settle()
            except Exception as exc:
                self.collector.report_failure("dump values", exc)

    # -- L1 ----------------------------------------------------------------------------
    def open_call(
        self, name: str, backward_name: str, key: str, args: tuple, kwargs: dict, writes: bool
    ) -> tuple[_ApiCall | None, tuple, dict]:
        collector = self.collector
        collector.enter(name)
        enclosing = tuple(self.module_stack)
        keep_forward = collector.keeps(name, "forward", enclosing)
        keep_backward = collector.keeps(backward_name, "backward", enclosing) and not _inplace(key)
        if not keep_forward and not keep_backward:
            collector.leave(name)
            return None, args, kwargs
        call = _ApiCall(name, keep_forward)
        if keep_forward:
            call.inputs = collector.encode_inputs(name, args, kwargs, eager=writes)
        if keep_backward:
            parent = self.innermost_module()
            args, kwargs, call.backward = self._hook_inputs(backward_name, args, kwargs, parent, parameters=not writes)
        call.args, call.kwargs = args, kwargs
        return call, args, kwargs

    def before_write(self, key: str, args: tuple, kwargs: dict) -> None:
        if self.summarizer.lazy:  # tensors waiting to be read are read as they are before the write
            self._settle()

    def run(self, original: Callable, args: tuple, kwargs: dict, call: Any, writes: bool) -> Any:
        try:
            output = original(*args, **kwargs)
            if call is not None:
                _surface_errors(output)
            return output
        finally:
            if writes:
                self.summarizer.clear()

    def close_call(self, call: _ApiCall, output: Any) -> Any:
        if call.keep_forward:
            parent = self.construct_parent(self.innermost_module())
            self._record_forward(call.name, call.inputs, output, (call.args, call.kwargs), parent)
        if call.backward is not None:
            self._hook_outputs(call.backward, output)
        self.collector.leave(call.name)
        return output

    def _hook_inputs(
        self,
        backward_name: str,
        args: tuple,
        kwargs: dict,
        parent: str | None,
        parameters: bool,
        always: bool = False,
    ) -> tuple[tuple, dict, _Backward | None]:
        """One leaving gradient per positional tensor argument (None where none flows), as MindSpore lists them.

        Each floating input passes through an ``ops.HookBackward`` identity
        that reports its gradient. The identity shares its input's memory,
        so writes to it still reach the caller's tensor, and MindSpore allows
        in-place ops on it (unlike the views a cell backward hook makes of a
        cell's outputs). ``parameters``: Parameters are hooked too (not for
        calls that may write: those may need the Parameter itself).
        ``always``: the record is kept even when no input is hooked (a cell's
        outputs may still receive gradients).
        """
        tensors = [position for position, value in enumerate(args) if isinstance(value, ms.Tensor)]
        slots = [(slot, position) for slot, position in enumerate(tensors) if _gradable(args[position], parameters)]
        if not slots and not always:
            return args, kwargs, None
        record = _Backward(self, backward_name, parent, len(slots), len(tensors))
        hooked = list(args)
        for slot, position in slots:
            hooked[position] = ops.HookBackward(record.on_input(slot))(args[position])
        self.pending.append(record)
        return tuple(hooked), kwargs, record

    def _hook_outputs(self, record: _Backward, output: Any) -> None:
        """Hooks for the gradients arriving at a call's outputs, attached when backward starts.

        ``Tensor.register_hook`` waits for the call's op to be run by
        PyNative's queue, which keeps the queue from running ahead of
        Python; attached together just before backward, the hooks cost one
        such wait. Where backward's start cannot be watched (another
        MindSpore release), and once many outputs wait (a long forward with
        no backward), they are attached at once.
        """
        outputs = list(output) if isinstance(output, (tuple, list)) else [output]
        record.outputs = len(outputs)
        for index, tensor in enumerate(outputs):
            if _gradable(tensor):
                record.hooked_outputs += 1
                self._unhooked.append((record, index, tensor))
        if not self.backward_start.active or len(self._unhooked) >= _MOST_UNHOOKED:
            self.hook_waiting_outputs()

    def _before_backward(self, original: Callable, key: str, args: tuple, kwargs: dict) -> Any:
        self.hook_waiting_outputs()
        return original(*args, **kwargs)

    def hook_waiting_outputs(self) -> None:
        """Runs in the user's call to backward: a failure is reported as any hook's is."""
        waiting, self._unhooked = self._unhooked, []
        for record, index, tensor in waiting:
            try:
                tensor.register_hook(record.on_output(index))
            except Exception as exc:  # logged once per API (raised with strict, or for a device error)
                self.collector.report_failure(record.name, exc)

    def write_backward(self, record: _Backward, arriving: list, leaving: list) -> None:
        collector = self.collector
        name = record.name
        with self.tool_running():
            try:
                if record.cell is not None:
                    name = collector.backward_numbering.start(record.cell[0])
                    if not collector.selects(name, record.cell[1]):
                        return
                parent = self.construct_parent(collector.backward_numbering.parent(record.parent))
                self._record(name, collector.backward, name, arriving, leaving, parent, holding=leaving)
            except Exception as exc:
                collector.report_failure(name, exc)

    @contextlib.contextmanager
    def original_primitives(self) -> Iterator[None]:
        """The cells' own primitives for a while (a jit graph is being compiled or run)."""
        for table, attribute, original in self._swapped:
            table[attribute] = original
        try:
            yield
        finally:
            for table, attribute, original in self._swapped:
                if table.get(attribute) is original:
                    table[attribute] = self._hooked[id(original)]

    def _hook_primitives(self) -> None:
        """``Primitive.{attribute}.{Class}`` entries for the primitives the model's cells hold (needs the model)."""
        model = self.session.model
        for root in list(model) if isinstance(model, (list, tuple)) else [model]:
            compiled = _inside_jit(root)
            for _name, cell in root.cells_and_names():
                primitives = cell.__dict__.get("_primitives")
                if id(cell) in compiled or _is_jit(cell):
                    continue  # its primitives run inside a compiled graph
                if not isinstance(primitives, dict):
                    continue
                for attribute, primitive in list(primitives.items()):
                    if not isinstance(primitive, Primitive) or type(primitive).__name__ in _HOOK_PRIMITIVES:
                        continue
                    hooked = _HookedPrimitive(primitive, f"Primitive.{attribute}.{type(primitive).__name__}", self)
                    self._hooked[id(primitive)] = hooked
                    for table in (primitives, cell.__dict__):  # the instance attribute is what construct reads
                        if table.get(attribute) is primitive:
                            table[attribute] = hooked
                            self._swapped.append((table, attribute, primitive))

    # -- L0 ---------------------------------------------------------------------------
    def hook_modules(self) -> None:
        for prefix, root in each_model(self.session.model):
            cells = list(root.cells_and_names())
            compiled = _inside_jit(root)
            for cell_name, cell in cells:
                if cell_name == "" and len(cells) > 1:
                    continue  # the whole network is not an entry
                if id(cell) in compiled:
                    continue  # runs inside a jit graph: no Python hook can run there
                label = module_label("Cell", prefix, cell_name, cell)
                try:
                    self._hook_cell(cell, label)
                except Exception as exc:  # this cell goes undumped; the others and the training go on
                    self.collector.report_failure(label, exc)

    def _hook_cell(self, cell: Any, label: str) -> None:
        hooks = self.module_hooks(cell, label)
        hooks.params.clear()
        hooks.params.update((name.split(".")[-1], p) for name, p in cell.parameters_and_names() if "." not in name)
        if hooks.adapters is None:
            hooks.adapters = _cell_adapters(hooks)
        pre, forward, close = hooks.adapters
        self.handles.append(cell.register_forward_pre_hook(pre))
        self.handles.append(cell.register_forward_hook(forward))
        self.handles.append(cell.register_forward_hook(close, always_call=True))
        for param_name, param in hooks.params.items():
            if param.requires_grad:
                self.handles.append(param.register_hook(self._grad_hook(hooks.grads_name, param_name, hooks.grads)))

    def open_module_call(
        self, name: str, backward_name: str, label: str, enclosing: tuple[str, ...], args: tuple, kwargs: dict
    ) -> tuple[_ApiCall, tuple | None]:
        self.collector.enter(name)
        call = _ApiCall(name, keep_forward=False)  # the forward side is decided when the cell returns
        # the list filter looks at the backward name once it is known, when the cell's backward starts
        if not self.collector.keeps(backward_name, "backward", enclosing, by_name=False):
            return call, None
        try:
            parent = enclosing[-1] if enclosing else None
            args, _kwargs, record = self._hook_inputs(backward_name, args, {}, parent, parameters=False, always=True)
            record.cell = (name, enclosing)
            call.backward = record
        except Exception as exc:  # no backward entry; the forward one is still written
            self.collector.report_failure(name, exc)
            return call, None
        return call, args

    def close_module_call(self, call: _ApiCall, hooks: ModuleHooks, args: tuple, kwargs: dict, output: Any) -> None:
        if call.backward is not None:
            self._hook_outputs(call.backward, output)
        if self.collector.keeps(call.name, "forward", tuple(self.module_stack)):
            inputs = self.collector.encode_inputs(call.name, args, {}, eager=False)  # the cell has run
            parent = self.innermost_module()
            self._record_forward(call.name, inputs, output, (args, {}), parent, parameters=hooks.params)
            if hooks.params and self.collector.keeps(hooks.grads_name, "backward"):
                self.collector.reserve(hooks.grads_name)

    def _grad_hook(self, grads_name: str, param_name: str, grads: dict[str, Any]) -> Callable:
        def hook(grad: Any) -> None:
            grads[param_name] = grad
            if self.collector.keeps(grads_name, "backward"):
                with self.tool_running():
                    try:
                        self.collector.parameters_grad(grads_name, dict(grads))
                    except Exception as exc:
                        self.collector.report_failure(grads_name, exc)

        return hook


def _cell_adapters(hooks: ModuleHooks) -> tuple[Callable, Callable, Callable]:
    """A cell's forward pre-, forward and close hooks in MindSpore's signatures."""

    def pre(_cell: Any, args: tuple) -> tuple | None:
        return hooks.pre(args, {})

    def forward(_cell: Any, args: tuple, output: Any) -> None:
        if not hooks.recorder.state.busy and hooks.pending:
            _surface_errors(output)  # the cell's own error, raised from its call (close then tidies up)
        hooks.forward(args, {}, output)

    def close(_cell: Any, args: tuple, output: Any) -> None:
        hooks.close()

    return pre, forward, close


def _surface_errors(output: Any) -> None:
    """Raise a call's own error here, where the user's code called it.

    When its inputs are still being computed (PyNative runs ahead, and
    inputs that went through ``HookBackward`` always are), MindSpore checks
    a call (shapes, dtypes) only when its result is first used; without
    this, that first use would be the tool's statistics, which would log the
    user's error as its own failure and hand back a broken tensor.
    """
    for value in output if isinstance(output, (tuple, list)) else (output,):
        if isinstance(value, ms.Tensor):
            value.shape  # noqa: B018 - reading the shape waits for the call's checks


def _gradable(value: Any, parameters: bool = False) -> bool:
    return (
        isinstance(value, ms.Tensor)
        and (parameters or not isinstance(value, ms.Parameter))
        and value.dtype in (ms.float16, ms.bfloat16, ms.float32, ms.float64)
    )
