"""The framework-neutral half of a dump: filtering, encoding, hierarchy, files.

A framework's hooks call this collector with names in the reference's
format and the raw values they saw; the collector decides what is kept,
encodes it (through the framework's tensor summarizer) and hands it to the
step's :class:`~msprobe.core.dump.writer.DumpWriter`.
"""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import json
import logging
import math
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

from msprobe.core.dump.backward_names import BackwardNumbering
from msprobe.core.dump.entry_names import kind_of
from msprobe.core.dump.numbers import NonFinite
from msprobe.core.dump.overflow import InputScreen, LaterScreen, OverflowCounter, has_nonfinite
from msprobe.core.dump.values import ValueEncoder
from msprobe.core.dump.writer import JOURNAL_NAME, NO_PARENT, DumpWriter
from msprobe.core.errors import DataFileError
from msprobe.core.files import make_dir, refuse_links_below
from msprobe.core.recording.filters import DataModeFilter, NameFilter, ScopeFilter
from msprobe.core.recording.session import TaskSession
from msprobe.core.recording.totals import DumpTotals

logger = logging.getLogger(__name__)

_UNCHANGED = contextlib.nullcontext()


def _plain_nonfinite(value: Any) -> bool:
    """An inf or nan given as a plain number (``masked_fill(mask, -inf)``, ``full(..., -inf)``)."""
    if isinstance(value, float):
        return not math.isfinite(value)
    if isinstance(value, (list, tuple)):
        return any(_plain_nonfinite(item) for item in value)
    if isinstance(value, dict):
        return any(_plain_nonfinite(item) for item in value.values())
    return False


def _produced_nonfinite(entry: dict[str, Any], raw_inputs: tuple[tuple, dict] | None) -> bool:
    """A call that made an inf or nan: its outputs hold one, its inputs (tensors as measured before the call,
    numbers, a module's parameters) hold none. Infinities a model makes on purpose (a -inf attention mask)
    come from numbers or flow on from inputs, and are not counted."""
    if not has_nonfinite(entry.get("output")):
        return False
    given = [entry.get(key) for key in ("input_args", "input_kwargs", "parameters")]
    if any(has_nonfinite(part) for part in given if part is not None):
        return False
    return not (raw_inputs is not None and _plain_nonfinite(raw_inputs))


def _backward_produced_nonfinite(entry: dict[str, Any]) -> bool:
    """A backward record whose leaving gradients (``output``) hold an inf or nan the arriving ones lack."""
    return has_nonfinite(entry["output"]) and not has_nonfinite(entry["input"])


def _statistics_of(encoded: Any) -> Any:
    """An encoded value without its file names, its statistics read: what two encodings of the same values
    share."""
    if isinstance(encoded, dict):
        return {key: _statistics_of(value) for key, value in encoded.items() if key != "data_name"}
    if isinstance(encoded, list):
        return [_statistics_of(item) for item in encoded]
    resolve = getattr(encoded, "resolve", None)  # a statistic read back from a device
    if resolve is not None:
        return resolve()
    value = getattr(encoded, "value", None)  # JSON text handed over whole (RawJSON)
    return _statistics_of(value()) if callable(value) else encoded


@dataclasses.dataclass(slots=True)
class _WaitingEntry:
    """A recorded entry the flight recorder looks at once its values are read back."""

    name: str
    entry: dict[str, Any]
    writer: Any
    stack: Any
    parent: Any
    plain_nonfinite: bool = False  # an inf or nan given as a plain number: made on purpose
    raw_inputs: tuple[tuple, dict] | None = None  # kept only to save the inputs' tensors (save_tensors)
    forward: bool = True


@dataclasses.dataclass(slots=True)
class _ScreenedCall:
    """An overflow check's call whose screen waits for a device batch: ``record`` decides on it and writes it,
    as for a call screened at once, should ``screen`` find a sum that is not finite."""

    name: str
    screen: LaterScreen
    record: Callable[[], Any]


def dump_task(task: str) -> str:
    """The dump task whose entries a task writes: the flight recorder's steps are statistics dumps, and 26.x's
    nan_check is the overflow check without its tensor files."""
    return _DUMP_TASKS.get(task, task)


_DUMP_TASKS = {"flight_recorder": "statistics", "nan_check": "overflow_check"}


class DumpCollector:
    """Receives forward/backward records for one run; writes one folder per step."""

    def __init__(
        self,
        session: TaskSession,
        encoder: ValueEncoder,
        tensor_dir_hook: Callable[[Any], None],
        saving_files: Callable[[bool], None] | None = None,
    ):
        self.session = session
        self.encoder = encoder
        self._set_tensor_dir = tensor_dir_hook
        self._saving_files = saving_files
        config = session.config
        self.task = dump_task(config.task)
        # the overflow check keeps the tensors of each call it finds; nan_check keeps their statistics only
        self.keeps_tensors = self.task == "tensor" or config.task == "overflow_check"
        self.names = NameFilter(config.api_list)
        self.modes = DataModeFilter(config.data_mode)
        self.scope = ScopeFilter(config.scope)
        self.writer: DumpWriter | None = None
        self.written = DumpTotals()  # what the closed steps wrote, for the line at the end of the run
        self.deferred = config.async_dump
        self.overflow = OverflowCounter(config.overflow_check.overflow_nums) if self.task == "overflow_check" else None
        self.hardware_flag: Callable[[], bool | None] | None = None
        # the device's own errors (an asynchronous kernel failure met at the tool's first sync) are the training's
        self.device_errors: tuple[type[BaseException], ...] = ()
        extra_info = config.extra_info
        # online pre-check sends instead
        self.writer_factory: Callable[[Any, dict], Any] = lambda folder, header: DumpWriter(
            folder, header, extra_info=extra_info
        )
        self.live: Any = None  # the live md5 diff against bench_path (task tensor)
        if config.live_diff:
            from msprobe.core.recording.live_diff import LiveDiff

            self.live = LiveDiff(session)
            if saving_files is not None:
                saving_files(False)  # tensor files only for the calls that differ
        self.flight: Any = None  # the NaN flight recorder's window and triggers (task flight_recorder)
        if config.task == "flight_recorder":
            from msprobe.core.recording.flight import FlightRecorder

            self.flight = FlightRecorder(session)
            self.writer_factory = self.flight.writer
        self._failed_names: set[str] = set()
        # fields a backend adds to dump.json's header at each step (the layout of a sharded run: "parallel")
        self.extra_header: Callable[[], dict[str, Any]] | None = None
        self.backward_numbering = BackwardNumbering()
        # values measured late (a backend's lazy statistics) are taken by this before any entry is encoded
        self.settle_values: Callable[[], None] | None = None
        # whether values are still being measured (a device batch): an entry made now is encoded when they are
        self.values_pending: Callable[[], bool] | None = None
        # the flight recorder's look for the first inf or nan, at entries whose values were still on their way
        # (one read each would undo the batch): taken when they are read back, in the order the calls ran
        self._nonfinite_waiting: list[_WaitingEntry] = []
        # the overflow check's calls whose tensors' sums are still on the device, in the order they ran
        self._screens_waiting: list[_ScreenedCall] = []

    def alarms(self) -> list[str]:
        """What this run's task has flagged so far, one phrase each: the overflow check's overflows kept, the
        flight recorder's triggers. A step guard compares them before and after a step (see StepGuard)."""
        found = []
        if self.overflow is not None:
            found += ["the overflow check kept a call with an inf or nan"] * self.overflow.count
        if self.flight is not None:
            found += [f"the flight recorder's {record['trigger']} trigger fired" for record in self.flight.triggered]
        return found

    # -- step folders ------------------------------------------------------------
    def open_step(self) -> DumpWriter:
        if self.writer is None:
            folder = self.session.dump_dir
            tensor_dir = folder / "dump_tensor_data" if self.keeps_tensors else None
            header = {
                "task": self.task,
                "level": self.session.config.level,
                "framework": self.session.framework,
                "dump_data_dir": str(tensor_dir) if tensor_dir else None,
            }
            if self.extra_header is not None:
                header.update({key: value for key, value in self.extra_header().items() if value is not None})
            batch = getattr(self.session, "batch", None)
            if batch is not None:  # serving: one request's rows compare across batches of other sizes
                header["batch"] = batch
            if self.session.config.dump_path:  # no link planted below dump_path may take the step elsewhere
                refuse_links_below(Path(self.session.config.dump_path), folder)
            if self.live is not None:  # the bench's step, read before anything of this one is written
                self.live.open_step()
            self.writer = self.writer_factory(folder, header)
            if tensor_dir is not None:
                make_dir(tensor_dir)
            self._set_tensor_dir(tensor_dir)
            self.scope.reset()
        return self.writer

    def flush_step(self) -> None:
        if self.writer is not None:
            self._settle_values()
            self.writer.flush()

    def close_step(self) -> None:
        """Write the step's files. The writer is let go first, whatever happens: a step whose files cannot be
        written (a full disk) must never lend its folder and journal to the next step's entries."""
        if self._screens_waiting:  # decided into this step, before its writer is let go
            self._settle_values()
        writer, self.writer = self.writer, None
        self.backward_numbering.reset()
        if writer is None:
            return
        self._set_tensor_dir(None)  # the next step's tensor files go to its own folder, made when it opens
        try:
            self._settle_values()
            writer.close()
            self.written.add(Path(writer.folder), len(getattr(writer, "data", ())))
            if self.live is not None:  # after the step's files: the diagnosis reads them
                self.live.write_report(writer.folder)
            if self.flight is not None:
                self.flight.step_closed(writer)
        except Exception as exc:
            folder = getattr(writer, "folder", self.session.dump_dir)
            lost = len(getattr(writer, "data", ()))
            raise DataFileError(
                folder,
                f"step {self.session.step}, rank {self.session.rank if self.session.rank is not None else '-'}: "
                f"dump.json, stack.json and construct.json could not be written ({exc}); the step's {lost} "
                f"entries are kept only in {folder / JOURNAL_NAME}, as far as it could be written",
            ) from exc

    def _settle_values(self) -> None:
        if self.settle_values is not None:
            self.settle_values()

    def entries_settled(self) -> None:
        """Every value of the deferred entries so far is final (see ``settle_values``): journal them."""
        if self._nonfinite_waiting:
            self._look_for_the_first_nonfinite()
        if self._screens_waiting:
            self._decide_screened()
        settle = getattr(self.writer, "settle", None)
        if settle is not None:
            settle()

    # -- selection ---------------------------------------------------------------------
    def keeps(self, name: str, direction: str, enclosing: tuple[str, ...] = (), by_name: bool = True) -> bool:
        """``by_name=False`` leaves the ``list`` check to ``selects``: a module's backward name comes late."""
        if not self.modes.keeps(direction) or not self.scope.inside:
            return False
        if self.overflow is not None and self.overflow.exhausted:
            return False
        return not by_name or self.selects(name, enclosing)

    def selects(self, name: str, enclosing: tuple[str, ...] = ()) -> bool:
        """The ``list`` field's verdict on an entry made inside the ``enclosing`` calls."""
        if not self.names.active:
            return True
        return self.names.matches(name) or any(self.names.matches(outer) for outer in enclosing)

    def enter(self, name: str) -> None:
        self.scope.enter(name)

    def leave(self, name: str) -> None:
        self.scope.leave(name)

    # -- records --------------------------------------------------------------------------
    def encode_inputs(self, name: str, args: tuple, kwargs: dict, eager: bool = True) -> Any:
        """Measure inputs now: an in-place API would change them before the output is seen.

        The overflow check only screens them (an :class:`InputScreen`), and only
        for calls that write in place (``eager``); the others' inputs matter
        only if an output is not finite, and are looked at then.
        """
        if self.overflow is not None:
            if not eager:
                return None
            later = self.encoder.screen_later((args, kwargs)) if self._hardware_absent() else None
            return InputScreen(later if later is not None else self.encoder.any_nonfinite((args, kwargs)))
        return self._encode_inputs(name, args, kwargs)

    def _encode_inputs(self, name: str, args: tuple, kwargs: dict) -> dict[str, Any]:
        if self.task == "structure":
            return {}
        if not self.modes.inputs:
            return {"input_args": [], "input_kwargs": {}}
        encoded_args, encoded_kwargs = self.encoder.encode_args(args, kwargs, name)
        return {"input_args": encoded_args, "input_kwargs": encoded_kwargs}

    def forward(
        self,
        name: str,
        inputs: Any,
        output: Any,
        parameters: dict[str, Any] | None = None,
        raw_inputs: tuple[tuple, dict] | None = None,
        stack: Callable[[], Any] | None = None,
        parent: Any = NO_PARENT,
        recompute: bool = False,
        in_place: bool = False,
    ) -> bool:
        """Record a forward entry, with its call stack and its parent in construct.json when given.
        ``in_place``: the call wrote into its inputs, so ``raw_inputs`` now hold other values than it was given:
        their summaries taken before it stand, and no tensor file is made of them.

        ``stack`` is called only for an entry that is kept. False when the
        overflow check decided not to keep it, or has yet to (its screen
        waits for a device batch). ``recompute`` marks a forward run again
        during backward (activation checkpointing).
        """
        if self.overflow is not None and self._hardware_absent():
            later = self.encoder.screen_later(output)
            if later is not None:
                if not later.finite:
                    stack_value = stack() if stack is not None else None  # where the call was made: now
                    record = functools.partial(self._record_forward, name, inputs, output, parameters, raw_inputs,
                                               lambda: stack_value, parent, recompute, in_place, later)  # fmt: skip
                    self._screens_waiting.append(_ScreenedCall(name, later, record))
                return False
        return self._record_forward(name, inputs, output, parameters, raw_inputs, stack, parent, recompute, in_place)

    def _record_forward(
        self,
        name: str,
        inputs: Any,
        output: Any,
        parameters: dict[str, Any] | None,
        raw_inputs: tuple[tuple, dict] | None,
        stack: Callable[[], Any] | None,
        parent: Any,
        recompute: bool,
        in_place: bool,
        screened: LaterScreen | None = None,
    ) -> bool:
        if self.overflow is not None:
            flag = self._hardware()  # None: a screened call waited, as only without the flag
            outputs_nonfinite = flag is None and (
                self.encoder.any_nonfinite(output) or (screened is not None and screened.nonfinite_then())
            )
            if flag is None and not outputs_nonfinite:
                return False  # the common case: one look at the outputs and done
            raw_inputs = raw_inputs or ((), {})
            if isinstance(inputs, InputScreen):
                inputs_nonfinite = inputs.nonfinite
            else:
                inputs_nonfinite = self.encoder.any_nonfinite(raw_inputs)
            if not self.overflow.overflowed(inputs_nonfinite, outputs_nonfinite, flag):
                return False
            with self._files():  # keep the tensors of an overflow, as the reference does
                inputs = self._encode_inputs(name, *raw_inputs)
        if self.overflow is None:
            entry = self._forward_entry(name, inputs, output, parameters, recompute)
        else:
            with self._files():  # the tensors of an overflow are kept
                entry = self._forward_entry(name, inputs, output, parameters, recompute)
        writer = self.open_step()
        stack_value = stack() if stack is not None else None
        if self.live is not None and self.live.check(name, entry) == "divergent":
            self.live.divergence(name, stack_value, parent)
            if self.live.wants_tensors() and raw_inputs is not None:  # this call's tensors are written
                with self._saving():
                    if not in_place:
                        entry.update(self._encode_inputs(name, *raw_inputs))
                    entry["output"] = self.encoder.encode_outputs(output, f"{name}.output")
        watching = self.flight is not None and self.flight.wants_nonfinite()
        if watching and self._values_pending():  # looked at once its values are read back
            writer.add(name, entry, True, stack_value, parent)
            plain = raw_inputs is not None and _plain_nonfinite(raw_inputs)
            kept_inputs = raw_inputs if self.flight.save_tensors and not in_place else None
            self._nonfinite_waiting.append(_WaitingEntry(name, entry, writer, stack_value, parent, plain, kept_inputs))
            return True
        first_nonfinite = watching and _produced_nonfinite(entry, raw_inputs)
        if first_nonfinite and self.flight.save_tensors and raw_inputs is not None and not in_place:
            with self._saving_tensors_of(writer):
                entry.update(self._encode_inputs(name, *raw_inputs))
        writer.add(name, entry, self._deferred(), stack_value, parent)
        if first_nonfinite:  # after the entry is in: the trigger writes the step so far
            self.flight.nonfinite(name, stack_value, parent)
        return True

    def _decide_screened(self) -> None:
        """The overflow check's waiting calls, their sums read: each whose sums are not all finite is decided on
        with its tensors as they are now (an in-place write since the call is not undone; see
        docs/overflow_check.md), in the order the calls ran."""
        waiting, self._screens_waiting = self._screens_waiting, []
        for call in waiting:
            if self.overflow.exhausted:
                return
            try:
                if call.screen.maybe_nonfinite():
                    call.record()
            except self.device_errors:
                raise
            except Exception as exc:  # one call's failure leaves the others to be decided
                self.report_failure(call.name, exc)

    def _look_for_the_first_nonfinite(self) -> None:
        """The flight recorder's look at the entries that waited for their values (``forward``, ``backward``).

        The inputs of the call found are saved now, as they are now: an in-place
        write between the call and its batch's read-back is not undone, and is
        told in a warning (their statistics, taken at the call, differ).
        """
        waiting, self._nonfinite_waiting = self._nonfinite_waiting, []
        for item in waiting:
            if not self.flight.wants_nonfinite():
                return
            if item.forward:
                found = not item.plain_nonfinite and _produced_nonfinite(item.entry, None)
            else:
                found = _backward_produced_nonfinite(item.entry)
            if not found:
                continue
            if item.raw_inputs is not None:
                try:
                    self._save_inputs_late(item)
                except self.device_errors:
                    raise
                except Exception as exc:  # the report and the steps matter more than the tensors: they go on
                    logger.warning("msprobe flight recorder: the inputs of %s were not saved (%s)", item.name, exc)
            self.flight.nonfinite(item.name, item.stack, item.parent)

    def _save_inputs_late(self, item: _WaitingEntry) -> None:
        entry = item.entry
        at_the_call = {key: entry.get(key) for key in ("input_args", "input_kwargs")}
        with self._saving_tensors_of(item.writer):
            entry.update(self._encode_inputs(item.name, *item.raw_inputs))
        self._settle_values()  # the statistics of the inputs as saved, read back now
        if _statistics_of(at_the_call) != _statistics_of({key: entry.get(key) for key in at_the_call}):
            logger.warning(
                "msprobe flight recorder: the inputs of %s were written in place after the call; the tensors "
                "saved are as they were when its values were read back",
                item.name,
            )

    def flight_handoff(self, name: str, text: str, args: tuple, kwargs: dict, stack: Any, parent: Any) -> bool:
        """A call the per-call path in C recorded, whose outputs show inf or nan: when it is the first to make
        one, the flight recorder's trigger, written here as ``forward`` writes it; else the C path writes it."""
        if self.flight is None or not self.flight.wants_nonfinite():
            return False
        entry = json.loads(text, parse_constant=NonFinite)  # Infinity and NaN stay tokens
        if not _produced_nonfinite(entry, (args, kwargs)):
            return False
        writer = self.open_step()
        if self.flight.save_tensors:
            with self._saving_tensors_of(writer):
                entry.update(self._encode_inputs(name, args, kwargs))
        writer.add(name, entry, self._deferred(), stack, parent)
        self.flight.nonfinite(name, stack, parent)
        return True

    def _forward_entry(
        self, name: str, inputs: Any, output: Any, parameters: dict[str, Any] | None, recompute: bool
    ) -> dict[str, Any]:
        entry = dict(inputs)
        if parameters is None:
            entry["is_recompute"] = recompute  # the reference's key order differs for APIs and modules
        if self.task != "structure":
            entry["output"] = self.encoder.encode_outputs(output, f"{name}.output") if self.modes.outputs else []
            if parameters is not None:
                entry["parameters"] = {
                    key: self.encoder.encode(value, f"{name}.parameters.{key}") for key, value in parameters.items()
                }
        entry["is_recompute"] = recompute
        return entry

    def backward(self, name: str, grad_of_outputs: Any, grad_of_inputs: Any, parent: Any = NO_PARENT) -> bool:
        """Reference naming: ``input`` holds the gradients arriving (w.r.t. outputs), ``output`` those leaving."""
        if self.overflow is not None and self._hardware_absent():
            later = self.encoder.screen_later(grad_of_inputs)
            if later is not None:
                if not later.finite:
                    record = functools.partial(self._record_backward, name, grad_of_outputs, grad_of_inputs, parent,
                                               later)  # fmt: skip
                    self._screens_waiting.append(_ScreenedCall(name, later, record))
                return False
        return self._record_backward(name, grad_of_outputs, grad_of_inputs, parent)

    def _record_backward(
        self, name: str, grad_of_outputs: Any, grad_of_inputs: Any, parent: Any, screened: LaterScreen | None = None
    ) -> bool:
        if self.overflow is not None:
            flag = self._hardware()  # None: a screened call waited, as only without the flag
            leaving_nonfinite = flag is None and (
                self.encoder.any_nonfinite(grad_of_inputs) or (screened is not None and screened.nonfinite_then())
            )
            if flag is None and not leaving_nonfinite:
                return False
            arriving_nonfinite = self.encoder.any_nonfinite(grad_of_outputs)
            if not self.overflow.overflowed(arriving_nonfinite, leaving_nonfinite, flag):
                return False
        entry: dict[str, Any] = {}
        if self.task != "structure":
            with self._files(self.overflow is not None):
                arriving = self.encoder.encode_outputs(grad_of_outputs, f"{name}.input") if self.modes.inputs else []
                leaving = self.encoder.encode_outputs(grad_of_inputs, f"{name}.output") if self.modes.outputs else []
            entry = {"input": arriving, "output": leaving}
            if self.live is not None and self.live.check(name, entry) == "divergent":
                self.live.divergence(name, None, parent)
                if self.live.wants_tensors():
                    with self._saving():
                        entry = {"input": self.encoder.encode_outputs(grad_of_outputs, f"{name}.input"),
                                 "output": self.encoder.encode_outputs(grad_of_inputs, f"{name}.output")}  # fmt: skip
        writer = self.open_step()
        watching = self.flight is not None and self.flight.wants_nonfinite() and bool(entry)
        if watching and self._values_pending():  # looked at once its values are read back
            writer.add(name, entry, True, parent=parent)
            self._nonfinite_waiting.append(_WaitingEntry(name, entry, writer, None, parent, forward=False))
            return True
        writer.add(name, entry, self._deferred(), parent=parent)
        if watching and _backward_produced_nonfinite(entry):
            self.flight.nonfinite(name, None, parent)
        return True

    def reserve(self, name: str) -> None:
        if self.overflow is None:
            self.open_step().reserve(name)

    def reserved(self, name: str) -> bool:
        """Whether this step holds a place for ``name``: a module's parameter gradients are written only when
        its forward ran in the step (as the reference), not for a module whose weights its parent uses."""
        return name in self.open_step().data

    def parameters_grad(self, name: str, grads: dict[str, Any]) -> None:
        if self.overflow is not None:
            return  # parameter gradients are no call's output: nothing overflows "in" them
        entry = {}
        if self.task != "structure":
            entry = {key: [self.encoder.encode(value, f"{name}.{key}")] for key, value in grads.items()}
        self.open_step().add(name, entry, self._deferred())

    def parent(self, name: str, parent: str | None) -> None:
        self.open_step().set_parent(name, parent)

    @contextlib.contextmanager
    def _saving_tensors_of(self, writer: Any) -> Iterator[None]:
        """Tensor files into this step's dump_tensor_data, for a task that keeps none otherwise."""
        folder = make_dir(writer.folder / "dump_tensor_data")
        writer.header["dump_data_dir"] = str(folder)
        self._set_tensor_dir(folder)
        try:
            with self._saving():
                yield
        finally:
            self._set_tensor_dir(None)

    def _deferred(self) -> bool:
        return self.deferred or self._values_pending()

    def _values_pending(self) -> bool:
        return self.values_pending is not None and self.values_pending()

    def _hardware_absent(self) -> bool:
        """No hardware overflow flag: the flag is read per call, so only the values' screen can wait."""
        return self.hardware_flag is None

    def _hardware(self) -> bool | None:
        return self.hardware_flag() if self.hardware_flag is not None else None

    def _files(self, on: bool = True) -> contextlib.AbstractContextManager[None]:
        """Overflow check: full statistics, and tensor files where the step has a folder for them, only for the
        calls that overflowed (a shared no-op otherwise)."""
        if not on or self._saving_files is None:
            return _UNCHANGED
        return self._saving()

    @contextlib.contextmanager
    def _saving(self) -> Iterator[None]:
        self._saving_files(True)
        try:
            yield
        finally:
            self._saving_files(False)

    # -- faults -------------------------------------------------------------------------
    def report_failure(self, name: str, exc: BaseException) -> None:
        """Log once per API name; the training goes on (with ``strict``, ``exc`` is raised instead).

        A device error is raised in any case: it belongs to some earlier
        kernel of the training, which cannot go on, and the tool only met
        it first.
        """
        if self.session.config.strict or isinstance(exc, self.device_errors):
            raise exc
        base = kind_of(name)
        if base not in self._failed_names:
            self._failed_names.add(base)
            logger.warning("msprobe: dumping %s failed and is skipped (%s: %s)", name, type(exc).__name__, exc)
