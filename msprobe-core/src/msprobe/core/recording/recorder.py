"""The skeleton both backends' dump recorders stand on.

A recorder is the TaskHooks of the dump tasks: it patches a framework's APIs
(L1), hooks its modules or cells (L0), or both (mix), and hands what it sees
to the :class:`~msprobe.core.recording.collector.DumpCollector`. What a call goes
through is the same on every framework and lives here: its name and number,
the per-call guard (a failure of the tool is reported once per API and the
user's call still runs exactly as without the tool), the module stack that
gives construct.json its parents, the labels of a model's modules, which
calls write their inputs, and the start and end of a step. A backend
supplies what calls its framework: which APIs to patch, how to hook a module
and how gradients are caught, through the methods marked "a backend's".
"""

from __future__ import annotations

import contextlib
import threading
import weakref
from collections import defaultdict
from collections.abc import Callable, Iterator
from typing import Any

from msprobe.core.api_patch import ApiPatcher, call_site
from msprobe.core.dump.pending_values import MARK, PLACEHOLDERS
from msprobe.core.dump.stack import stack_capture
from msprobe.core.dump.summarizer import TensorSummarizer
from msprobe.core.dump.writer import NO_PARENT
from msprobe.core.recording.collector import DumpCollector
from msprobe.core.recording.session import TaskSession
from msprobe.core.recording.totals import DumpTotals

ENTRY_LEVELS = ("L0", "L1", "mix")  # the levels whose entries come from the recorder's hooks


_IN_PLACE_OPERATORS = frozenset(
    f"__i{name}__"
    for name in ("add", "sub", "mul", "matmul", "truediv", "floordiv", "div", "mod", "pow", "lshift", "rshift",
                 "and", "or", "xor")
)  # fmt: skip


def in_place_by_name(key: str) -> bool:
    """APIs whose names say they write their first argument: ``add_``, ``__iadd__``, ``__setitem__`` (and not
    ``__add__``, ``__invert__`` or ``__index__``, which only look like it)."""
    api = key.rsplit(".", 1)[-1]
    if api.startswith("__") and api.endswith("__"):
        return api in _IN_PLACE_OPERATORS or api == "__setitem__"
    return api.endswith("_")


class WriteRule:
    """Which calls overwrite a tensor they were given, so their inputs are measured before they run.

    ``by_name(key)`` is the backend's rule for a call's name without its
    count ("Tensor.add_", or a module's label); ``out=`` and
    ``inplace=True`` make any call one. Answers by name are kept, the rule
    runs once per API.
    """

    def __init__(self, by_name: Callable[[str], bool]):
        self._rule = by_name
        self._known: dict[str, bool] = {}

    def by_name(self, key: str) -> bool:
        known = self._known.get(key)
        if known is None:
            known = self._known[key] = bool(self._rule(key))
        return known

    def __call__(self, key: str, kwargs: dict) -> bool:
        if kwargs and ("out" in kwargs or kwargs.get("inplace") is True):
            return True
        return self.by_name(key)


def each_model(model: Any) -> list[tuple[str, Any]]:
    """The models a debugger was given, each with the prefix its module labels carry ("0.", "1." for a list)."""
    models = list(model) if isinstance(model, (list, tuple)) else [model]
    return [(f"{index}." if len(models) > 1 else "", root) for index, root in enumerate(models)]


def module_label(kind: str, prefix: str, name: str, module: Any) -> str:
    """``Module.layers.0.Linear`` (PyTorch) or ``Cell.layers.0.Dense`` (MindSpore), as the reference names them."""
    cls = type(module).__name__
    return f"{kind}.{prefix}{name or cls}.{cls}"


class DumpRecorder:
    """TaskHooks of the dump tasks, shared by the backends.

    A backend sets ``patcher`` (its APIs, handled by :meth:`call_api`) and
    ``write_watch`` (the writes that get no entry at this level, handled by
    :meth:`note_write`), and implements the methods marked "a backend's".
    """

    patcher: ApiPatcher
    write_watch: ApiPatcher

    def __init__(
        self,
        session: TaskSession,
        summarizer: TensorSummarizer,
        encoder: Any,
        tool_root: str,
        writes: WriteRule,
    ):
        self.session = session
        self.level = session.config.level
        self.summarizer = summarizer
        self.collector = DumpCollector(session, encoder, summarizer.set_tensor_dir, summarizer.set_saving)
        self.writes_in_place = writes
        # cached statistics must see every write
        self.watches_writes = summarizer.caches and self.level in ENTRY_LEVELS
        self.api_counts: dict[str, int] = defaultdict(int)
        self.module_counts: dict[str, int] = defaultdict(int)
        self.module_stack: list[str] = []  # forward names of the module calls running, innermost last
        self.handles: list[Any] = []  # hook handles removed at stop()
        self.stack = stack_capture(tool_root)
        self.with_construct = self.level in ("L0", "mix")
        self._module_hooks: dict[str, ModuleHooks] = {}  # by label: made once, put on at every start()
        # held for the tool's own work (never while a recorded call itself runs): hooks may run on several threads
        # at once (backward on a device's threads, a user's threads), and the names, batches and step they share
        # must stay whole
        self.lock = threading.RLock()

    @property
    def state(self) -> Any:
        """The thread's busy flag: set while a recorded call or the tool itself runs."""
        return self.patcher.state

    # -- TaskHooks ------------------------------------------------------------------
    def install(self) -> None:
        with self.lock:
            self._install()

    def _install(self) -> None:
        self.summarizer.clear()  # what happened while the dump was off went unseen: measure afresh
        self.collector.open_step()
        self.starting()
        if self.watches_writes:
            self.write_watch.install()
        if self.level in ("L1", "mix"):
            self.patcher.install()
            self.hook_apis()
        if self.level in ("L0", "mix"):
            self.hook_modules()
        self.started()

    def remove(self) -> None:
        with self.lock:
            self._remove()

    def _remove(self) -> None:
        self.stopping()
        self.patcher.remove()
        self.write_watch.remove()
        self.stack.forget()
        for handle in self.handles:
            handle.remove()
        self.handles.clear()
        self.module_stack.clear()
        self.guard(self.flush_values, "tensor files")
        self.guard(self.collector.flush_step, "dump files")
        self.stopped()

    def end_step(self) -> None:
        with self.lock:
            self._end_step()

    def _end_step(self) -> None:
        self.finish_step()
        self.guard(self.flush_values, "tensor files")
        self.guard(self.collector.close_step, "dump files")
        self.api_counts.clear()
        self.module_counts.clear()
        self.summarizer.clear()

    def close(self) -> None:
        self.summarizer.close()

    def summary(self) -> DumpTotals:
        """What the closed steps wrote (the session's line at the end of the run)."""
        return self.collector.written

    def observe_loss(self, loss: Any) -> None:
        """The flight recorder's loss-spike trigger (``debugger.step(loss=...)``); other tasks ignore it."""
        flight = self.collector.flight
        if flight is not None:
            self.guard(lambda: flight.observe_loss(_number(loss)), "flight recorder")

    def flush(self) -> None:
        """The flight recorder's ``debugger.flush()``: write the window now."""
        flight = self.collector.flight
        if flight is not None:
            self.guard(flight.flush, "flight recorder")

    def guard(self, action: Callable[[], None], what: str) -> None:
        """Run tool work outside any call: a failure is reported under ``what``, never raised into training."""
        with self.lock:
            try:
                action()
            except Exception as exc:
                self.collector.report_failure(what, exc)

    @contextlib.contextmanager
    def tool_running(self) -> Iterator[None]:
        """Framework calls made inside are the tool's own (reads, hook work): they get no entries."""
        state = self.state
        busy = state.busy
        state.busy = True
        try:
            with self.lock:
                yield
        finally:
            state.busy = busy

    # -- names -----------------------------------------------------------------------
    def api_names(self, key: str) -> tuple[str, str]:
        """The forward and backward names of an API's next call: ``Functional.relu.3.forward``/``.backward``."""
        index = self.api_counts[key]
        self.api_counts[key] = index + 1
        return f"{key}.{index}.forward", f"{key}.{index}.backward"

    def module_names(self, label: str) -> tuple[str, str]:
        """The forward name of a module's next call and the first guess at its backward name (see backward_names)."""
        index = self.module_counts[label]
        self.module_counts[label] = index + 1
        return f"{label}.forward.{index}", f"{label}.backward.{index}"

    def innermost_module(self) -> str | None:
        return self.module_stack[-1] if self.module_stack else None

    def construct_parent(self, parent: str | None) -> Any:
        """construct.json's parent, or NO_PARENT at L1, which writes no construct.json."""
        return parent if self.with_construct else NO_PARENT

    # -- L1: the per-call guard ------------------------------------------------------------
    def call_api(self, original: Callable, key: str, args: tuple, kwargs: dict) -> Any:
        """The handler of every patched API: the call always runs, whatever the tool's own work does."""
        state = self.state
        state.busy = True
        lock = self.lock
        try:
            with lock:
                name, backward_name = self.api_names(key)
                writes = self.writes_in_place(key, kwargs)
                call = None
                try:
                    call, args, kwargs = self.open_call(name, backward_name, key, args, kwargs, writes)
                except Exception as exc:
                    self.collector.report_failure(name, exc)
                    self.collector.leave(name)
                if writes:  # the inputs were measured as they are now: the call is about to change them
                    try:
                        self.before_write(key, args, kwargs)
                    except Exception as exc:
                        self.collector.report_failure(name, exc)
            try:
                output = self.run(original, args, kwargs, call, writes)
            except BaseException:
                if call is not None:  # the call never returned: it gets no entry, and a scope it ends still ends
                    with lock:
                        self.collector.leave(name)
                raise
            if call is not None:
                with lock:
                    try:
                        output = self.close_call(call, output)
                    except Exception as exc:
                        self.collector.report_failure(name, exc)
                        self.collector.leave(name)
            return output
        finally:
            state.busy = False

    def note_write(self, original: Callable, key: str, args: tuple, kwargs: dict) -> Any:
        """The handler of the writes that get no entry: the statistics cache must still hear of them."""
        with self.lock:
            try:
                self.before_write(key, args, kwargs)
            except Exception as exc:
                self.collector.report_failure(key, exc)
        return self.run(original, args, kwargs, None, True)

    # -- L0: modules -----------------------------------------------------------------------
    def module_hooks(self, module: Any, label: str) -> ModuleHooks:
        """The hook functions of one module, made once per module (made afresh at each start(), a model's few
        thousand closures per step keep Python's garbage collector busy)."""
        hooks = self._module_hooks.get(label)
        if hooks is None or not hooks.belongs_to(module):
            hooks = self._module_hooks[label] = ModuleHooks(self, module, label)
        hooks.pending.clear()  # a call left open by an exception of the last step
        hooks.grads.clear()
        return hooks

    # -- a backend's ---------------------------------------------------------------------------
    def starting(self) -> None:
        """Before any hook goes on at start()."""

    def started(self) -> None:
        """After the level's hooks went on."""

    def stopping(self) -> None:
        """First thing at stop()."""

    def stopped(self) -> None:
        """Last thing at stop(), after the step's files were flushed."""

    def finish_step(self) -> None:
        """At step(), before the step's files are closed: write what is still waiting."""

    def flush_values(self) -> None:
        """Write tensor files that are still waiting."""

    def hook_apis(self) -> None:
        """L1 and mix: hooks beyond ``patcher`` (compiled functions, primitives held by the model)."""

    def hook_modules(self) -> None:
        """L0 and mix: hook the model's modules (see :meth:`module_hooks`)."""
        raise NotImplementedError

    def open_call(
        self, name: str, backward_name: str, key: str, args: tuple, kwargs: dict, writes: bool
    ) -> tuple[Any, tuple, dict]:
        """Before an API runs: the call's record (None: nothing of it is kept, and the collector has left it)
        and the arguments to run it with."""
        raise NotImplementedError

    def before_write(self, key: str, args: tuple, kwargs: dict) -> None:
        """A call is about to write its inputs: what was measured of them is no longer true afterwards."""

    @call_site
    def run(self, original: Callable, args: tuple, kwargs: dict, call: Any, writes: bool) -> Any:
        """The user's call itself."""
        return original(*args, **kwargs)

    def close_call(self, call: Any, output: Any) -> Any:
        """After an API returned: write its forward entry, watch its backward, leave it; the output to hand on."""
        raise NotImplementedError

    def open_module_call(
        self, name: str, backward_name: str, label: str, enclosing: tuple[str, ...], args: tuple, kwargs: dict
    ) -> tuple[Any, Any]:
        """A module call starts: its record (None: the collector has left it) and arguments to run it with
        instead of the user's (None: the user's)."""
        raise NotImplementedError

    def close_module_call(self, call: Any, hooks: ModuleHooks, args: tuple, kwargs: dict, output: Any) -> Any:
        """A module call returned: write its forward entry and watch its backward; the output to hand on instead
        of the module's (None: the module's). The collector leaves the call afterwards."""
        raise NotImplementedError


class ModuleHooks:
    """One module's forward pre-, forward and always-called close hooks, whatever the framework.

    The pre-hook opens a call (its name goes on the module stack), the
    forward hook writes and closes it, and the close hook, which runs after
    the forward hook and alone when the forward raised (a caught
    out-of-memory, say), closes a call the forward hook did not: else every
    later entry of the step would be filed under it. The backend adapts
    these to its framework's hook signatures.
    """

    def __init__(self, recorder: DumpRecorder, module: Any, label: str):
        self.recorder = recorder
        self.label = label
        self.module = weakref.ref(module)
        self.grads_name = f"{label}.parameters_grad"
        self.params: dict[str, Any] = {}  # its own parameters, by their names in the module
        self.grads: dict[str, Any] = {}  # the gradient each parameter's hook saw last, since start()
        self.pending: list[list[Any]] = []  # per call still open, innermost last: [its record, its pushed name]
        self.adapters: Any = None  # the backend's hook functions around these, made once

    def belongs_to(self, module: Any) -> bool:
        return self.module() is module

    def pre(self, args: tuple, kwargs: dict) -> Any:
        with self.recorder.lock:
            return self._pre(args, kwargs)

    def forward(self, args: tuple, kwargs: dict, output: Any) -> Any:
        with self.recorder.lock:
            return self._forward(args, kwargs, output)

    def close(self) -> None:
        with self.recorder.lock:
            self._close()

    def _pre(self, args: tuple, kwargs: dict) -> Any:
        recorder = self.recorder
        state = recorder.state
        if state.busy:
            return None
        state.busy = True
        call = pushed = replaced = None
        try:
            name, backward_name = recorder.module_names(self.label)
            enclosing = tuple(recorder.module_stack)
            call, replaced = recorder.open_module_call(name, backward_name, self.label, enclosing, args, kwargs)
            recorder.module_stack.append(name)
            pushed = name
        except Exception as exc:
            recorder.collector.report_failure(self.label, exc)
        finally:
            self.pending.append([call, pushed])
            state.busy = False
        return replaced

    def _forward(self, args: tuple, kwargs: dict, output: Any) -> Any:
        recorder = self.recorder
        state = recorder.state
        if state.busy or not self.pending:
            return None
        opened = self.pending[-1]
        call, pushed = opened
        opened[:] = [None, None]  # closed here: nothing left for close() to undo
        state.busy = True
        try:
            self._leave_stack(pushed)
            if call is None:
                return None
            try:
                return recorder.close_module_call(call, self, args, kwargs, output)
            finally:
                recorder.collector.leave(call.name)
        except Exception as exc:
            recorder.collector.report_failure(call.name if call is not None else self.label, exc)
            return None
        finally:
            state.busy = False

    def _close(self) -> None:
        if self.recorder.state.busy or not self.pending:
            return
        call, pushed = self.pending.pop()  # both None when forward() closed the call
        self._leave_stack(pushed)
        if call is not None:  # the forward did not end here (it raised): its entry is never written
            self.recorder.collector.leave(call.name)
            inputs = getattr(call, "inputs", None)
            if isinstance(inputs, str) and MARK in inputs:  # its inputs' values, waiting for a read-back, go too
                PLACEHOLDERS.drop(inputs)

    def _leave_stack(self, pushed: str | None) -> None:
        stack = self.recorder.module_stack
        if pushed is not None and stack and stack[-1] == pushed:
            stack.pop()


def _number(loss: Any) -> float:
    """A loss as a float, without the framework's warning about a tensor that still needs a gradient."""
    detach = getattr(loss, "detach", None)
    return float(detach() if callable(detach) else loss)
