"""Transient or persistent, on a live training loop: each step runs under a guard that saves its starting state
and records its calls; when the rule fires, the step runs again from that state and the two executions are
compared (the verdict: msprobe.core.rerun).

What is saved per step: a copy of the model's parameters and buffers, of their gradients, of the optimizer's
state and of the batch, and the random states (torch's, CUDA's, Python's and numpy's). What is recorded per
call: an exact checksum of its outputs (the sum of their bits read as integers: any single changed bit changes
it) and whether they hold inf or nan, through a torch dispatch mode; a few small operations per call.
"""

from __future__ import annotations

import contextlib
import copy
import logging
import random
import sys
from collections.abc import Callable, Iterator
from typing import Any

import torch
from torch import nn
from torch.utils._python_dispatch import TorchDispatchMode

from msprobe.core.api_patch import CALL_SITES
from msprobe.core.rerun import Call, LossRule, Verdict, judge

logger = logging.getLogger(__name__)

_BITS = {8: torch.int64, 4: torch.int32, 2: torch.int16, 1: torch.uint8}


def _tensors(value: Any):
    if isinstance(value, torch.Tensor):
        yield value
    elif isinstance(value, (list, tuple)):
        for item in value:
            yield from _tensors(item)


def _checksum(tensor: torch.Tensor) -> tuple[int, bool]:
    """The sum of the tensor's bits read as integers, and whether it holds inf or nan."""
    if tensor.layout != torch.strided or tensor.is_complex() or tensor.numel() == 0:
        return 0, False
    data = tensor.detach().contiguous()
    nonfinite = bool(data.is_floating_point() and not torch.isfinite(data).all())
    if data.dtype == torch.bool:
        data = data.to(torch.uint8)
    integers = data.view(_BITS[data.element_size()]) if data.is_floating_point() else data
    return int(integers.sum(dtype=torch.int64)), nonfinite  # accumulated in int64, with no widened copy


# msprobe's modules that run a patched API for its caller: between a call site and the API's caller
_DISPATCH = frozenset({"msprobe.core.api_patch", "msprobe.core.recording.recorder", "msprobe.pytorch.dump.recorder"})


def _made_by_the_tool() -> bool:
    """Whether the operator being dispatched was issued by msprobe's own work (a dump's statistics, its hooks'
    detaching, a grad probe's arithmetic), not by the user's step: its innermost frame outside torch (and this
    module) is one of msprobe's. A frame that runs a patched API's call (api_patch.CALL_SITES) hands the
    question to whoever called the API: the user's code, or msprobe's own (a tool's arithmetic through a
    wrapper another debugger left installed)."""
    frame = sys._getframe(2)
    through_a_call = False
    while frame is not None:
        module = frame.f_globals.get("__name__", "")
        skipped = module == "torch" or module.startswith("torch.") or module == __name__
        if skipped or frame.f_code in CALL_SITES or (through_a_call and module in _DISPATCH):
            through_a_call = through_a_call or frame.f_code in CALL_SITES
            frame = frame.f_back
            continue
        return module.startswith("msprobe.")
    return False


class _Recorder(TorchDispatchMode):
    """Each operator call of the user's step: its name, module, checksum and non-finite flag. The operators of
    msprobe's own work are left out of every execution alike: a dump recording the first execution and not the
    re-run, or any other tool of msprobe's hooked into the training (a grad probe's optimizer hook)."""

    def __init__(self, stack: list[str]):
        super().__init__()
        self.stack = stack
        self.calls: list[Call] = []
        self.seen: dict[str, int] = {}

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        if _made_by_the_tool():
            return out
        name = str(func)
        checksum, nonfinite = 0, False
        # an empty tensor's memory is whatever was there: not a result, and other in each execution
        for tensor in () if "empty" in name else _tensors(out):
            value, bad = _checksum(tensor)
            checksum, nonfinite = (checksum * 1_000_003 + value) % (1 << 64), nonfinite or bad
        backward = torch._C._current_graph_task_id() != -1
        module = "backward" if backward else (self.stack[-1] if self.stack else "")
        self.calls.append(Call(len(self.calls), name, module, checksum, nonfinite, self.seen.get(name, 0)))
        self.seen[name] = self.seen.get(name, 0) + 1
        return out


def _loss_value(loss: Any) -> float:
    """The step's loss as a float: a tensor of one value, or a number."""
    if isinstance(loss, torch.Tensor) and loss.numel() == 1:
        return float(loss.detach())
    if isinstance(loss, (int, float)) and not isinstance(loss, bool):
        return float(loss)
    shown = f"a tensor of shape {list(loss.shape)}" if isinstance(loss, torch.Tensor) else type(loss).__name__
    raise TypeError(f"msprobe StepGuard: the step function must return its loss (one value), not {shown}")


def _clone(value: Any) -> Any:
    if isinstance(value, torch.Tensor):
        return value.detach().clone()
    if isinstance(value, (list, tuple)):
        return type(value)(_clone(item) for item in value)
    if isinstance(value, dict):
        return {key: _clone(item) for key, item in value.items()}
    return copy.deepcopy(value)


class StepGuard:
    """Run each training step through :meth:`run`; a step whose loss (or gradients' norm) the rule flags is run
    again from its saved start, and its verdict (transient or persistent) is logged and kept in ``verdicts``.

    ``step(batch)`` must run one whole step (zero the gradients, forward, backward, optimizer step) and return
    the loss. After a re-run, training goes on from the second execution.

    ``debugger``: a PrecisionDebugger that dumps each step's first execution (the guard starts it, stops it and
    ends its step with the loss). What its task flags in the step (the overflow check's overflows, the flight
    recorder's triggers) also sends the step to be run again, undumped; and its config's ``rerun`` section is
    the switch: ``enabled`` false keeps nothing and runs no step twice, ``loss_threshold`` sets the rule."""

    def __init__(
        self,
        model: nn.Module,
        optimizer: torch.optim.Optimizer | None = None,
        rule: LossRule | None = None,
        debugger: Any = None,
    ):
        self.model, self.optimizer, self.debugger = model, optimizer, debugger
        switch = debugger.config.rerun if debugger is not None else None
        self.enabled = switch is None or switch.enabled
        self.rule = rule or (LossRule(threshold=switch.loss_threshold) if switch is not None else LossRule())
        self.verdicts: list[Verdict] = []
        self.step_number = 0
        self.paths = {id(module): name for name, module in model.named_modules()}

    def run(self, step: Callable[[Any], torch.Tensor], batch: Any) -> torch.Tensor:
        if not self.enabled:
            loss = self._dumped(step, batch)
            self.step_number += 1
            return loss
        saved = self._save(batch)
        flagged_before = len(self.debugger.alarms()) if self.debugger is not None else 0
        first, loss = self._recorded(step, batch, dumped=self.debugger is not None)
        value = _loss_value(loss)
        if self.debugger is not None:
            self.debugger.step(loss=value)
        reason = self.rule.fires(value, self._gradient_norm())
        if reason is None and self.debugger is not None:
            flagged = list(dict.fromkeys(self.debugger.alarms()[flagged_before:]))
            reason = "; ".join(flagged) if flagged else None
        if reason is not None:
            self._restore(saved)
            second, again = self._recorded(step, _clone(saved["batch"]))
            verdict = judge(self.step_number, reason, first, second, value, _loss_value(again))
            self.verdicts.append(verdict)
            logger.warning("msprobe: %s", verdict.line())
            loss = again
        self.step_number += 1
        return loss

    def _dumped(self, step: Callable[[Any], torch.Tensor], batch: Any) -> torch.Tensor:
        """The step under the debugger alone (the switch is off): nothing saved, nothing recorded."""
        if self.debugger is None:
            return step(batch)
        with self._dumping():
            loss = step(batch)
        self.debugger.step(loss=_loss_value(loss))
        return loss

    @contextlib.contextmanager
    def _dumping(self) -> Iterator[None]:
        """The debugger started for the block, and stopped however it ends."""
        self.debugger.start()
        try:
            yield
        finally:
            self.debugger.stop()

    def _recorded(
        self, step: Callable[[Any], torch.Tensor], batch: Any, dumped: bool = False
    ) -> tuple[list[Call], torch.Tensor]:
        stack: list[str] = []
        paths = self.paths

        def enter(module: nn.Module, args: Any) -> None:
            stack.append(paths.get(id(module), stack[-1] if stack else ""))

        def leave(module: nn.Module, args: Any, output: Any) -> None:
            if stack:
                stack.pop()

        handles = [
            torch.nn.modules.module.register_module_forward_pre_hook(enter),
            torch.nn.modules.module.register_module_forward_hook(leave),
        ]
        recorder = _Recorder(stack)
        try:
            with self._dumping() if dumped else contextlib.nullcontext(), recorder:
                loss = step(batch)
        finally:
            for handle in handles:
                handle.remove()
        return recorder.calls, loss

    def _gradient_norm(self) -> float | None:
        norms = [p.grad.detach().double().norm() for p in self.model.parameters() if p.grad is not None]
        return float(torch.stack(norms).norm()) if norms else None

    def _save(self, batch: Any) -> dict[str, Any]:
        saved: dict[str, Any] = {
            "model": {name: tensor.detach().clone() for name, tensor in self.model.state_dict().items()},
            "grads": {
                name: None if p.grad is None else p.grad.detach().clone() for name, p in self.model.named_parameters()
            },
            "optimizer": copy.deepcopy(self.optimizer.state_dict()) if self.optimizer is not None else None,
            "batch": _clone(batch),
            "torch": torch.get_rng_state(),
            "cuda": torch.cuda.get_rng_state_all() if torch.cuda.is_available() else None,
            "python": random.getstate(),
        }
        try:
            import numpy

            saved["numpy"] = numpy.random.get_state()
        except ImportError:  # pragma: no cover - numpy comes with torch
            saved["numpy"] = None
        return saved

    def _restore(self, saved: dict[str, Any]) -> None:
        with torch.no_grad():
            self.model.load_state_dict(saved["model"])
            for name, parameter in self.model.named_parameters():
                grad = saved["grads"].get(name)
                parameter.grad = None if grad is None else grad.clone()
        if self.optimizer is not None:
            self.optimizer.load_state_dict(saved["optimizer"])
        torch.set_rng_state(saved["torch"])
        if saved["cuda"] is not None:
            torch.cuda.set_rng_state_all(saved["cuda"])
        random.setstate(saved["python"])
        if saved["numpy"] is not None:
            import numpy

            numpy.random.set_state(saved["numpy"])
