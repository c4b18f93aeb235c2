"""Precision bisection on a live model: which modules a bf16 or fp16 step needs in float32 to come back within a
tolerance of its float32 twin (the search itself: msprobe.core.bisect).

Each run starts from a fresh copy of the model and the same random state, so runs differ only in which modules
are in float32. Two ways to run in low precision, as users train:

- ``cast``: the model cast to the low dtype (``model.to(torch.bfloat16)``); a module in float32 keeps its
  float32 parameters, and each module's floating inputs are cast to its own precision as it is called;
- ``autocast``: the step under ``torch.autocast``; a module in float32 runs with autocast off, its floating
  inputs cast to float32.

The loss is taken in float32 of the model's output, and the distance from the twin is the larger of the loss's
relative error and every parameter gradient's (relative L2): a non-finite loss or gradient is infinitely far.
"""

from __future__ import annotations

import copy
import functools
import math
from collections.abc import Callable, Sequence
from typing import Any

import torch
from torch import nn

from msprobe.core.bisect import Bisection, bisect, estimated_runs
from msprobe.core.errors import UsageError

DTYPES = {"bf16": torch.bfloat16, "fp16": torch.float16}
MODES = ("cast", "autocast")
# the distance a low-precision step may keep from its float32 twin, by default: a few units of the dtype's
# rounding (2**-8 for bf16, 2**-11 for fp16) summed over a small model's reductions
DEFAULT_TOLERANCE = {"bf16": 5e-2, "fp16": 1e-2}
SEED = 1234  # every run's random state: dropout masks the same in each


def _default_loss(output: Any) -> torch.Tensor:
    tensor = output if isinstance(output, torch.Tensor) else next(_floating(output))
    return tensor.float().square().mean()


def _floating(value: Any):
    if isinstance(value, torch.Tensor) and value.is_floating_point():
        yield value
    elif isinstance(value, (list, tuple)):
        for item in value:
            yield from _floating(item)
    elif isinstance(value, dict):
        for item in value.values():
            yield from _floating(item)


def _cast(value: Any, dtype: torch.dtype) -> Any:
    if isinstance(value, torch.Tensor):
        return value.to(dtype) if value.is_floating_point() and value.dtype != dtype else value
    if isinstance(value, tuple):
        return tuple(_cast(item, dtype) for item in value)
    if isinstance(value, list):
        return [_cast(item, dtype) for item in value]
    if isinstance(value, dict):
        return {key: _cast(item, dtype) for key, item in value.items()}
    return value


def leaf_modules(model: nn.Module) -> list[str]:
    """The default candidates: every module with no submodule, in the order the model registers them."""
    return [name for name, module in model.named_modules() if name and not any(True for _ in module.children())]


def _in(path: str, upcast: Sequence[str]) -> bool:
    return any(path == name or path.startswith(f"{name}.") for name in upcast)


class Step:
    """One training step of ``model`` on ``inputs``: its float32 twin measured once, then any low-precision
    variant measured against it."""

    def __init__(
        self,
        model: nn.Module,
        inputs: tuple,
        loss: Callable[[Any], torch.Tensor] | None,
        dtype: str,
        mode: str,
    ):
        if dtype not in DTYPES:
            raise UsageError(f"dtype '{dtype}' is not one of {', '.join(DTYPES)}")
        if mode not in MODES:
            raise UsageError(f"mode '{mode}' is not one of {', '.join(MODES)}")
        self.model, self.inputs, self.loss = model, inputs, loss or _default_loss
        self.dtype, self.mode = DTYPES[dtype], mode
        parameter = next(model.parameters(), None)
        self.device = parameter.device.type if parameter is not None else "cpu"
        # the accelerator's random state too (a dropout mask there), kept for the user as it was
        self.rng_devices = [] if self.device == "cpu" or parameter is None else [parameter.device.index or 0]
        self.reference = self._run(copy.deepcopy(model), autocast=False)
        if not math.isfinite(self.reference[0]):
            raise UsageError("the float32 step itself gives a non-finite loss: there is no twin to come back to")

    def _run(self, model: nn.Module, autocast: bool) -> tuple[float, dict[str, torch.Tensor]]:
        """The step's loss and its parameters' gradients in float32."""
        with torch.random.fork_rng(devices=self.rng_devices, device_type=self.device):
            torch.manual_seed(SEED)
            with torch.autocast(self.device, dtype=self.dtype, enabled=autocast):
                output = model(*self.inputs)
            loss = self.loss(_cast(output, torch.float32))
            loss.backward()
        gradients = {
            name: parameter.grad.detach().float()
            for name, parameter in model.named_parameters()
            if parameter.grad is not None
        }
        return float(loss.detach()), gradients

    def error(self, upcast: Sequence[str]) -> float:
        """The distance from the float32 twin of the step with ``upcast`` in float32, the rest in low precision."""
        model = copy.deepcopy(self.model)
        if self.mode == "cast":
            self._cast_but(model, upcast)
        else:
            for name in upcast:
                module = model.get_submodule(name)
                module.forward = functools.partial(_without_autocast, module.forward, self.device)
        loss, gradients = self._run(model, autocast=self.mode == "autocast")
        return _distance((loss, gradients), self.reference)

    def _cast_but(self, model: nn.Module, upcast: Sequence[str]) -> None:
        """The model in the low dtype but the modules of ``upcast``; each module's inputs cast to its own."""
        for path, module in model.named_modules():
            own = torch.float32 if _in(path, upcast) else self.dtype
            for tensor in [*module.parameters(recurse=False), *module.buffers(recurse=False)]:
                if tensor.is_floating_point():
                    tensor.data = tensor.data.to(own)
            module.register_forward_pre_hook(functools.partial(_inputs_to, own), with_kwargs=True)


def _inputs_to(dtype: torch.dtype, module: nn.Module, args: tuple, kwargs: dict) -> tuple[tuple, dict]:
    return _cast(args, dtype), _cast(kwargs, dtype)


def _without_autocast(forward: Callable, device: str, *args: Any, **kwargs: Any) -> Any:
    with torch.autocast(device, enabled=False):
        return forward(*_cast(args, torch.float32), **_cast(kwargs, torch.float32))


def _distance(run: tuple[float, dict[str, torch.Tensor]], reference: tuple[float, dict[str, torch.Tensor]]) -> float:
    loss, gradients = run
    reference_loss, reference_gradients = reference
    if not math.isfinite(loss):
        return math.inf
    worst = abs(loss - reference_loss) / max(abs(reference_loss), 1e-12)
    for name, expected in reference_gradients.items():
        got = gradients.get(name)
        if got is None:
            continue
        if not bool(torch.isfinite(got).all()):
            return math.inf
        scale = float(expected.double().norm())
        difference = float((got.double() - expected.double()).norm())
        if scale > 0 or difference > 0:
            worst = max(worst, difference / max(scale, 1e-12))
    return worst


def bisect_precision(
    model: nn.Module,
    inputs: Any,
    loss: Callable[[Any], torch.Tensor] | None = None,
    *,
    dtype: str = "bf16",
    mode: str = "cast",
    tolerance: float | None = None,
    modules: Sequence[str] | None = None,
    rank: bool = True,
    progress: Callable[[str], None] | None = None,
) -> Bisection:
    """The smallest set of ``modules`` (default: every leaf module) whose float32 upcast brings a ``dtype`` step
    of ``model`` on ``inputs`` within ``tolerance`` of its float32 twin; with ``rank``, each module's error
    alone in low precision. ``loss`` takes the model's output (in float32) to the scalar the step differentiates
    (default: the mean square of the output). The model is left as it was: each run works on a copy."""
    inputs = tuple(inputs) if isinstance(inputs, (list, tuple)) else (inputs,)
    candidates = list(modules) if modules else leaf_modules(model)
    known = {name for name, _ in model.named_modules() if name}
    unknown = [name for name in candidates if name not in known]
    if unknown:
        raise UsageError(f"module {unknown[0]!r} is not in the model (its paths: {', '.join(sorted(known)[:8])}...)")
    if not candidates:
        raise UsageError("the model has no submodules to bisect over")
    tolerance = DEFAULT_TOLERANCE[dtype] if tolerance is None and dtype in DEFAULT_TOLERANCE else tolerance
    if tolerance is not None and not (math.isfinite(tolerance) and tolerance > 0):
        raise UsageError(f"the tolerance must be a positive number, not {tolerance}")
    step = Step(model, inputs, loss, dtype, mode)
    return bisect(candidates, step.error, float(tolerance), dtype, rank=rank, progress=progress)


def runs_to_expect(model: nn.Module, modules: Sequence[str] | None, rank: bool) -> int:
    """A progress bar's first total for :func:`bisect_precision` (it grows when more modules are needed)."""
    return estimated_runs(len(modules) if modules else len(leaf_modules(model)), rank)
