"""The PyTorch dump hooks: patched APIs (L1), module hooks (L0), both (mix).

Only the outermost framework call is recorded: while a recorded API runs,
the APIs it calls go straight to the originals. Every piece of tool code
runs inside ``try``: a failure is logged once per API and the user's call
still happens exactly as it would without the tool.
"""

from __future__ import annotations

import functools
import logging
import math
import os
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any, NamedTuple

import torch
from torch.utils._pytree import tree_leaves

from msprobe.core.api_patch import ApiPatcher as CoreApiPatcher
from msprobe.core.dump.overflow import InputScreen
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
from msprobe.pytorch.api_patch import ApiPatcher, api_targets, unlisted_in_place_targets
from msprobe.pytorch.compiled import EagerWhileOn, compile_escape, untraced
from msprobe.pytorch.dump import grad_taps, parallel
from msprobe.pytorch.dump.call_record import CallRecord
from msprobe.pytorch.dump.fast_path import make_fast_path
from msprobe.pytorch.dump.risk import api_selection
from msprobe.pytorch.dump.tensors import TensorSummarizer, describe_object
from msprobe.pytorch.modules import hookable_modules, warn_unhooked

logger = logging.getLogger(__name__)

_TOOL_ROOT = str(Path(__file__).resolve().parents[2])


_DEVICE_ERRORS = tuple(error for error in (getattr(torch, "AcceleratorError", None),) if error is not None)
_graph_task_id = getattr(torch._C, "_current_graph_task_id", lambda: -1)
_CHECKPOINT_FILE = os.path.join("torch", "utils", "checkpoint.py")
_FUNCTION_FILE = os.path.join("torch", "autograd", "function.py")


def _recomputing() -> bool:
    """A forward call that activation checkpointing makes again during backward.

    The reference's rule: inside torch's ``recompute_fn`` (non-reentrant
    checkpoint), or inside a ``backward`` that autograd's Function machinery
    called (the reentrant checkpoint, Megatron's and any custom Function).
    A call in a gradient hook is not one. Frames are looked at only while
    backward runs, so the usual forward pays one C call.
    """
    if _graph_task_id() == -1:
        return False
    frame = sys._getframe(1)
    while frame is not None:
        code = frame.f_code
        if code.co_name == "recompute_fn" and code.co_filename.endswith(_CHECKPOINT_FILE):
            return True
        if code.co_name in ("backward", "checkpoint_function_backward"):
            caller = frame.f_back
            for _ in range(2):  # Function.apply, or one wrapper between
                if caller is None:
                    break
                if caller.f_code.co_filename.endswith(_FUNCTION_FILE):
                    return True
                caller = caller.f_back
        frame = frame.f_back
    return False


def _in_place_by_name(key: str) -> bool:
    """``key`` is the API's name without its count ("Tensor.add_") or a module's label."""
    # a module may do anything; collectives write their tensors
    return key.startswith(("Module.", "Distributed.")) or in_place_by_name(key)


# calls that overwrite an input (add_, x[i] = y, out=, inplace=True): their inputs are measured before them
WRITES_IN_PLACE = WriteRule(_in_place_by_name)


def _overwritten(key: str, args: tuple, kwargs: dict) -> list[Any]:
    """The tensors an in-place call writes: ``out=``, else its first argument.

    A collective may write any of its tensors, and so may torch's private
    multi-tensor functions (a fused optimizer writes parameters and states).
    """
    if key.startswith(("Distributed.", "Torch._")):
        return [t for value in (*args, *kwargs.values()) for t in _tensors_in(value)]
    if kwargs and "out" in kwargs:
        return _tensors_in(kwargs["out"])
    return _tensors_in(args[0]) if args else []


def _undumped_writers(level: str, selected: Callable[[str], bool] | None) -> list[tuple[Any, str, str]]:
    """APIs that write tensors but get no entry: the unlisted in-place ones; at L0 the listed ones too, and
    those ``risk_level`` leaves out."""
    targets = unlisted_in_place_targets()
    if level == "L0":
        targets += [target for target in api_targets() if WRITES_IN_PLACE.by_name(target[2])]
    elif selected is not None:
        targets += [t for t in api_targets() if WRITES_IN_PLACE.by_name(t[2]) and not selected(t[2])]
    return targets


def _tensors_in(value: Any) -> list[Any]:
    return [tensor for tensor in grad_taps.output_tensors(value) if tensor is not None]


def npu_overflow_flag() -> Callable[[], bool | None] | None:
    """Ascend's hardware overflow status, read and cleared per call, when torch_npu offers it."""
    torch_npu = sys.modules.get("torch_npu")
    utils = getattr(getattr(torch_npu, "npu", None), "utils", None)
    read = getattr(utils, "get_npu_overflow_flag", None)
    clear = getattr(utils, "clear_npu_overflow_flag", None)
    if read is None or clear is None:
        return None

    def flag() -> bool | None:
        try:
            overflowed = bool(read())
            clear()
            return overflowed
        except Exception:  # the flag is a hint; inf/nan detection still works
            return None

    return flag


class TorchDumpRecorder(DumpRecorder):
    """TaskHooks for tasks statistics, tensor and structure on PyTorch."""

    def __init__(self, session: TaskSession):
        config = session.config
        summarizer = TensorSummarizer(
            dump_task(config.task),
            config.summary_mode,
            deferred=config.async_dump,
            live_diff=bool(config.live_diff),
            cut=session.tensor_cut,
            kv_cache=session.kv_cache,
        )
        encoder = ValueEncoder(torch.Tensor, summarizer, describe_object)
        super().__init__(session, summarizer, encoder, _TOOL_ROOT, WRITES_IN_PLACE)
        self.collector.hardware_flag = npu_overflow_flag()
        self.collector.device_errors = _DEVICE_ERRORS
        self.host_reads = 0  # the device path's reads back to the host in the last step (see DeviceBatch)
        batch = summarizer.batch
        if batch is not None:  # device statistics are read back in batches; entries wait for theirs
            batch.on_read = self.collector.entries_settled
            self.collector.settle_values = batch.read_back
            self.collector.values_pending = lambda: batch.waiting() > 0
            batch.after_backward = self._read_back_after_backward
        self.sender = None
        if config.task == "tensor" and config.tensor.online_run_ut:
            self._go_online(config)
        selected = api_selection(config)  # risk_level: the APIs left out are not wrapped
        self.patcher = ApiPatcher(self.call_api, selected)
        # in-place calls that are not dumped still tell the statistics cache what they wrote
        self.write_watch = CoreApiPatcher(
            self.note_write, lambda: _undumped_writers(self.level, selected), compile_escape()
        )
        self._optimizer_frame: Any = None  # mix: the running optimizer.step()'s frame, while its node is open
        # calls that need no backward record take the per-call path in C, where this run's entries allow it
        self.fast_path = make_fast_path(self, WRITES_IN_PLACE.by_name, _overwritten, _graph_task_id)
        if self.fast_path is not None:
            self.patcher.handler = self.fast_path  # before the first install, which builds the wrappers around it
        # the fast path also writes module, backward and parameter-gradient entries, except for the overflow check
        self.fast_path_entries = (
            self.fast_path if self.fast_path is not None and self.collector.overflow is None else None
        )
        # the overflow check's API backward: the fast path screens the leaving gradients, and only inf or nan reaches
        # the recorder's hook (the collector would find nothing to write in the others)
        self.backward_screen = (
            self.fast_path.screen_first if self.fast_path is not None and self.fast_path_entries is None else None
        )
        self.eager = EagerWhileOn([self.patcher, self.write_watch])
        self._told_scripted = False
        # a sharded run: the parallel framework's own calls go unrecorded, and dump.json says the layout
        self.framework_calls = parallel.FrameworkCalls()
        declared = self.session.config.tensor_parallel
        declared = declared.model_dump(exclude_none=True) if declared is not None else None
        self.collector.extra_header = lambda: {"parallel": parallel.header(self.session.model, declared)}
        # a DDP model's parameter gradients are read again once its all-reduce is done (see _param_grad_hook)
        self._grads_to_reread: dict[str, ModuleHooks] = {}
        self._reread_grads = False

    # -- the step ---------------------------------------------------------------------
    def starting(self) -> None:
        self.eager.on()
        self.framework_calls.install()
        layout = parallel.data_parallel_group(self.session.model)
        self._reread_grads = layout is not None and layout["kind"] == "ddp"

    def started(self) -> None:
        if self.level == "mix":
            self._hook_optimizers()
        if self._reread_grads:
            from torch.optim.optimizer import register_optimizer_step_pre_hook

            self.handles.append(register_optimizer_step_pre_hook(lambda *_: self._reread_parameter_grads()))

    def stopping(self) -> None:
        self._reread_parameter_grads()
        self.eager.off()
        self.framework_calls.remove()
        self._optimizer_frame = None

    def _reread_parameter_grads(self) -> None:
        """DDP averages the gradients over its ranks after each parameter's gradient hook has run: the
        ``parameters_grad`` entries written then are rewritten with the averaged values, once the backward (and
        its all-reduce) is over, at the optimizer's step or at stop(). They are then the gradients that the
        optimizer applies, alike on every rank, as the one-process run's are."""
        pending, self._grads_to_reread = self._grads_to_reread, {}
        if pending:
            with self.tool_running():
                self._rewrite_parameter_grads(pending)

    def _rewrite_parameter_grads(self, pending: dict[str, ModuleHooks]) -> None:
        for hooks in pending.values():
            grads = {}
            for key, param in hooks.params.items():
                grad = _gradient_of(param) if param.grad is not None else hooks.grads.get(key)
                if grad is not None:
                    grads[key] = grad
            if grads:
                self.guard(functools.partial(self.collector.parameters_grad, hooks.grads_name, grads), hooks.grads_name)

    def flush_values(self) -> None:
        self.summarizer.write_pending()

    def finish_step(self) -> None:
        batch = self.summarizer.batch
        if batch is not None:
            self.guard(batch.read_back, "dump values")
            self.host_reads = batch.take_reads()
            logger.debug("msprobe: %d host reads in step %d", self.host_reads, self.session.step)

    def _read_back_after_backward(self) -> None:
        """A backward pass has ended: its entries' values are read, and journaled, before the next forward."""
        with self.tool_running():
            self.guard(self.summarizer.batch.read_back, "dump values")

    def close(self) -> None:
        super().close()
        if self.sender is not None:
            self.sender.close()

    def _hook_optimizers(self) -> None:
        """Group what optimizer.step() calls under an 'optimizer' node of construct.json."""
        from torch.optim.optimizer import register_optimizer_step_post_hook, register_optimizer_step_pre_hook

        def pre(optimizer: Any, args: tuple, kwargs: dict) -> None:
            if not self.state.busy:
                with self.lock:
                    self._close_raised_optimizer()
                    self.collector.parent("optimizer", None)
                    self.module_stack.append("optimizer")
                    self._optimizer_frame = sys._getframe(1)  # torch's wrapper around step(), which calls the hooks

        def post(optimizer: Any, args: tuple, kwargs: dict) -> None:
            with self.lock:
                if not self.state.busy and self.module_stack and self.module_stack[-1] == "optimizer":
                    self.module_stack.pop()
                    self._optimizer_frame = None

        self.handles.append(register_optimizer_step_pre_hook(pre))
        self.handles.append(register_optimizer_step_post_hook(post))

    def _close_raised_optimizer(self) -> None:
        """An optimizer.step() that raised gets no post hook: its node is closed when it is seen to have ended.

        Looked at when a module or the next optimizer step starts, so the
        calls of a training that caught the exception and went on are not
        filed under the optimizer.
        """
        running = self._optimizer_frame
        if running is None:
            return
        frame = sys._getframe(1)
        while frame is not None:
            if frame is running:
                return  # still inside step(): a module it calls belongs under it
            frame = frame.f_back
        self._optimizer_frame = None
        if "optimizer" in self.module_stack:
            del self.module_stack[self.module_stack.index("optimizer") :]

    def _go_online(self, config: Any) -> None:
        """Online pre-check: entries and their tensors go to the receiver instead of the disk."""
        from msprobe.core.online.protocol import read_token
        from msprobe.core.online.sender import OnlineSender
        from msprobe.core.online.writer import OnlineWriter

        section = config.tensor
        self.sender = OnlineSender(
            rank=self.session.rank or 0,
            host=section.host,
            port=section.port,
            tls_path=section.tls_path,
            nfs_path=section.nfs_path or None,
            queue_size=section.online_queue_size,
            block_seconds=section.online_block_seconds,
            token=read_token(section.auth_token_path),
        )
        self.summarizer.online = {}
        sender, summarizer, session = self.sender, self.summarizer, self.session
        self.collector.writer_factory = lambda folder, header: OnlineWriter(sender, summarizer.online, session)

    # -- L1: framework APIs ------------------------------------------------------------
    def open_call(
        self, name: str, backward_name: str, key: str, args: tuple, kwargs: dict, writes: bool
    ) -> tuple[CallRecord | None, tuple, dict]:
        return self._before(name, backward_name, args, kwargs, writes), args, kwargs

    def before_write(self, key: str, args: tuple, kwargs: dict) -> None:
        if self.summarizer.caches:
            self.summarizer.overwriting(_overwritten(key, args, kwargs))

    def close_call(self, call: CallRecord, output: Any) -> Any:
        if call.keep_forward:
            self.collector.forward(
                call.name,
                call.inputs,
                output,
                raw_inputs=(call.args, call.kwargs),
                stack=self.stack,
                parent=self.construct_parent(call.parent),
                recompute=_recomputing(),
                in_place=call.in_place,
            )
        if call.keep_backward:
            call.watch_node(output)
        self.collector.leave(call.name)
        return output

    def watch_backward(
        self,
        name: str,
        backward_name: str,
        parent: str | None,
        grad_inputs: list,
        output: Any,
        nodes_before: tuple | None = None,
    ) -> None:
        """The fast path wrote a call's forward entry: its backward entry comes, as the recorder's own, from the
        autograd node that made the output (see ``CallRecord.watch_node``). ``nodes_before``: the inputs'
        nodes as they were before an in-place call replaced them (None: the call did not write in place)."""
        record = self._fast_path_record(name, backward_name, parent)
        record.grad_inputs = grad_inputs
        record.nodes_before = nodes_before
        record.watch_node(output)

    def late_backward_hook(self, name: str, backward_name: str, parent: Any) -> Callable:
        """The overflow check's node hook for a call whose leaving gradients the fast path found inf or nan in (its
        ScreenFirst hook, registered in C, makes the record only then): as ``watch_backward``'s record would."""
        return self._fast_path_record(name, backward_name, parent)._node_hook

    def _fast_path_record(self, name: str, backward_name: str, parent: Any) -> CallRecord:
        """The backward record of a call the fast path wrote (or screened): its entry is kept, by this recorder."""
        record = CallRecord(name, backward_name, (), {}, parent)
        record.keep_backward = True
        record.recorder = self
        return record

    def forward_overflowed(
        self, name: str, screened: bool | None, output: Any, args: tuple, kwargs: dict, parent: Any
    ) -> None:
        """The fast path met inf or nan in a call's output: the collector decides whether it overflowed and writes it.

        ``screened``: what the fast path found in the inputs of an in-place call before it ran (None: not screened).
        """
        inputs = InputScreen(screened) if screened is not None else None
        self.collector.forward(name, inputs, output, raw_inputs=(args, kwargs), stack=self.stack, parent=parent)

    def _before(
        self, name: str, backward_name: str, args: tuple, kwargs: dict, in_place: bool = True
    ) -> CallRecord | None:
        collector = self.collector
        collector.enter(name)
        enclosing = tuple(self.module_stack)
        module = name.startswith("Module.")
        keep_forward = collector.keeps(name, "forward", enclosing)
        # a module's backward number is given when its backward starts: the list filter looks at it then
        keep_backward = torch.is_grad_enabled() and collector.keeps(
            backward_name, "backward", enclosing, by_name=not module
        )
        if not keep_forward and not keep_backward:
            collector.leave(name)
            return None
        record = CallRecord(name, backward_name, args, kwargs, self.innermost_module())
        if record.parent is None and not module and _graph_task_id() != -1:
            # a call the backward makes (a custom autograd function's backward, a tensor hook) runs within the
            # module backward open now, as the reference records it
            record.parent = collector.backward_numbering.innermost()
        record.keep_forward = keep_forward
        record.in_place = in_place and not module
        if module:
            record.enclosing = enclosing
        if keep_forward:
            # a module's entry is written by the fast path (module_entry), its inputs' text kept until then
            if module and self.fast_path_entries is not None:
                record.inputs = self.fast_path_entries.inputs_text(name, args, kwargs)
            else:
                record.inputs = collector.encode_inputs(name, args, kwargs, eager=in_place)
        if keep_backward:
            record.grad_inputs = grad_taps.tensors_requiring_grad((args, kwargs) if kwargs else args)
            keep_backward = bool(record.grad_inputs) or module
            if in_place and not module:  # the call is about to replace the inputs' nodes
                record.nodes_before = grad_taps.nodes_of(record.grad_inputs)
        record.keep_backward = keep_backward
        record.recorder = self
        return record

    def _flight_looks_at(self, values: Any) -> bool:
        """The flight recorder, waiting for the first inf or nan, decides on an entry whose values hold one: such
        an entry goes the Python way (DumpCollector.forward/backward), which asks it."""
        flight = self.collector.flight
        if flight is None or not flight.wants_nonfinite():
            return False
        screen = self.summarizer.quick_nonfinite
        return any(
            screen(leaf) if isinstance(leaf, torch.Tensor) else isinstance(leaf, float) and not math.isfinite(leaf)
            for leaf in tree_leaves(values)
        )

    # -- backward records ---------------------------------------------------------------
    def write_backward(self, record: CallRecord, grads_in: tuple) -> None:
        # tool_running() inlined: a generator context manager costs about 2 us on every backward entry
        state = self.state
        busy, state.busy = state.busy, True
        try:
            with self.lock:
                self._write_backward(record, grads_in)
        finally:
            state.busy = busy

    def _write_backward(self, record: CallRecord, grads_in: tuple) -> None:
        collector = self.collector
        closing = None
        try:
            numbering = collector.backward_numbering
            if record.enclosing is not None:  # a module call: it closes once written
                record.backward_name = numbering.open(record.name)
                closing = record.backward_name
                if not collector.selects(record.backward_name, record.enclosing):
                    return
                parent = numbering.opened_under(record.backward_name)
            else:
                parent = numbering.innermost()
            parent = self.construct_parent(parent)
            outputs = [record.output_grads.get(i) for i in range(record.output_count)]
            if self.fast_path_entries is not None and not self._flight_looks_at(grads_in):  # the same entry, in C
                self.fast_path_entries.backward_entry(record.backward_name, outputs, list(grads_in), parent)
            else:
                collector.backward(record.backward_name, outputs, list(grads_in), parent)
        except Exception as exc:
            self.collector.report_failure(record.backward_name, exc)
        finally:
            if closing is not None:
                collector.backward_numbering.close(closing)

    # -- L0: modules ---------------------------------------------------------------------------
    def hook_modules(self) -> None:
        scripted: list[str] = []
        for prefix, root in each_model(self.session.model):
            children, left_out = hookable_modules(root)
            scripted += [f"{prefix}{name}" for name in left_out]
            whole_model = len(children) + len(left_out) > 1
            for module_name, module in children:
                if module_name == "" and whole_model:
                    continue  # the whole model is not an entry, as in the reference
                label = module_label("Module", prefix, module_name, module)
                try:
                    self._hook_module(module, label)
                except Exception as exc:  # this module goes undumped; the others and the training go on
                    self.collector.report_failure(label, exc)
        if not self._told_scripted:
            self._told_scripted = True
            warn_unhooked(scripted, "dumped")

    def _hook_module(self, module: torch.nn.Module, label: str) -> None:
        """Forward via module hooks; backward via tensor hooks, which never alter the graph."""
        hooks = self.module_hooks(module, label)
        if hooks.adapters is None:
            hooks.adapters = _ModuleAdapters(
                untraced(lambda mod, args, kwargs: hooks.pre(args, kwargs)),
                untraced(lambda mod, args, kwargs, output: hooks.forward(args, kwargs, output)),
                untraced(lambda mod, args, kwargs, output: hooks.close()),
                self._param_grad_hook(hooks),
            )
        adapters = hooks.adapters
        hooks.params.clear()
        hooks.params.update(module.named_parameters(recurse=False))
        self.handles.append(module.register_forward_pre_hook(adapters.pre, with_kwargs=True))
        self.handles.append(module.register_forward_hook(adapters.forward, with_kwargs=True))
        self.handles.append(module.register_forward_hook(adapters.close, with_kwargs=True, always_call=True))
        for param in hooks.params.values():
            if param.requires_grad:
                self.handles.append(param.register_post_accumulate_grad_hook(adapters.grad))

    def open_module_call(
        self, name: str, backward_name: str, label: str, enclosing: tuple[str, ...], args: tuple, kwargs: dict
    ) -> tuple[CallRecord | None, None]:
        if self._optimizer_frame is not None:
            self._close_raised_optimizer()
        parent = self.innermost_module()
        record = self._before(name, backward_name, args, kwargs)
        if record is not None:
            record.parent = parent
            record.first_node = grad_taps.next_node_number()
            record.first_watch = grad_taps.watch_number()
            if record.keep_backward:  # before the call: an in-place module moves its input in the graph
                record.input_anchors = grad_taps.anchors(list(args))
        return record, None

    def close_module_call(self, call: CallRecord, hooks: ModuleHooks, args: tuple, kwargs: dict, output: Any) -> Any:
        params = hooks.params
        replaced = None  # the output to hand on instead of the module's, when its outputs were tapped
        if call.keep_forward and self.fast_path_entries is not None and not self._flight_looks_at(output):  # in C
            self.fast_path_entries.module_entry(
                call.name, call.inputs, output, params, self.stack(), call.parent, _recomputing()
            )
        elif call.keep_forward:
            self.collector.forward(
                call.name,
                call.inputs,
                output,
                parameters=params,
                raw_inputs=(args, kwargs),
                stack=self.stack,
                parent=call.parent,
                recompute=_recomputing(),
            )
        if params and torch.is_grad_enabled() and any(p.requires_grad for p in params.values()):
            if self.collector.keeps(hooks.grads_name, "backward"):
                self.collector.reserve(hooks.grads_name)
        if not self.module_stack and self.summarizer.batch is not None:  # a top-level module's call ended
            self.summarizer.batch.read_back()
        if call.keep_backward:
            outputs = grad_taps.output_tensors(output)
            call.watch_inputs(args, outputs)
            if not call.handed_back and grad_taps.needs_tap(outputs, call.first_node):
                # only a node after the module tells the outside's share of an output's gradient
                output, node, indices = grad_taps.tap_outputs(output, outputs)
                call.watch_tap(node, indices, len(outputs))
                replaced = output
            else:
                call.watch_outputs(outputs)
        return replaced

    def _param_grad_hook(self, hooks: ModuleHooks) -> Callable:
        """``parameters_grad``: rewritten as each parameter's gradient arrives, so the last one holds them all.

        A gradient is kept as it arrives: Megatron-style training moves
        ``.grad`` into ``main_grad`` and empties it before the module's other
        parameters are done. A parameter whose gradient went straight into
        ``main_grad`` (Megatron's ``grad_added_to_main_grad``) is read there.
        """
        grads_name, params, seen = hooks.grads_name, hooks.params, hooks.grads

        def hook(param: torch.Tensor) -> None:
            with self.tool_running():
                try:
                    for key, candidate in params.items():
                        if candidate is param:
                            seen[key] = _gradient_of(param)
                    if self.collector.keeps(grads_name, "backward") and self.collector.reserved(grads_name):
                        grads = {}
                        for key, p in params.items():
                            grad = _gradient_of(p) if p.grad is not None else seen.get(key)
                            if grad is not None:
                                grads[key] = grad
                        if self.fast_path_entries is not None:  # the same entry, encoded in C
                            self.fast_path_entries.grads_entry(grads_name, grads)
                        else:
                            self.collector.parameters_grad(grads_name, grads)
                        if self._reread_grads:
                            self._grads_to_reread[grads_name] = hooks
                except Exception as exc:
                    self.collector.report_failure(grads_name, exc)

        return hook


def _gradient_of(param: torch.Tensor) -> torch.Tensor | None:
    if getattr(param, "grad_added_to_main_grad", False) and getattr(param, "main_grad", None) is not None:
        return param.main_grad
    return param.grad


class _ModuleAdapters(NamedTuple):
    """One module's hook functions in torch's signatures, made once and put on at every start()."""

    pre: Callable
    forward: Callable
    close: Callable
    grad: Callable
