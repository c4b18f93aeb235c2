"""Free benchmark on PyTorch: re-run each selected API with perturbed inputs and compare.

``check`` reports APIs whose output moves more than the dtype allows under
a perturbation that should not matter (``free_benchmark.csv``); ``fix``
hands the training the output computed from the perturbed (higher
precision, or CPU) inputs instead. Perturbations are plugins: the six
built-in ones below register through ``msprobe_free_benchmark_perturbations``
exactly as a third party's would.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any

import numpy as np
import torch

from msprobe.core.backend import Perturbation
from msprobe.core.errors import UsageError
from msprobe.core.free_benchmark import FreeBenchmarkJudge, dtype_key
from msprobe.core.session import TaskSession
from msprobe.pytorch.api_patch import ApiPatcher

logger = logging.getLogger(__name__)

_HIGHER = {torch.float16: torch.float32, torch.bfloat16: torch.float32, torch.float32: torch.float64}
_NOISE = {torch.float16: 2**-11, torch.bfloat16: 2**-9, torch.float32: 2**-22, torch.float64: 2**-50}
_BITS = {
    torch.float16: torch.int16,
    torch.bfloat16: torch.int16,
    torch.float32: torch.int32,
    torch.float64: torch.int64,
}
# APIs whose outputs differ run to run, or that cannot be run twice
_NOT_REPEATABLE = (
    "dropout",
    "rand",
    "bernoulli",
    "multinomial",
    "normal",
    "uniform_",
    "exponential_",
    "empty",
    "Distributed.",
    "manual_seed",
    "item",
    "tolist",
    "numpy",
    "__bool__",
    "__setitem__",
)


def improve_precision(tensor: torch.Tensor) -> torch.Tensor:
    return tensor.to(_HIGHER.get(tensor.dtype, tensor.dtype))


def add_noise(tensor: torch.Tensor) -> torch.Tensor:
    scale = _NOISE.get(tensor.dtype)
    if scale is None:
        return tensor
    return tensor + tensor.abs() * scale


def bit_noise(tensor: torch.Tensor) -> torch.Tensor:
    """Flip the last mantissa bit of every element."""
    bits = _BITS.get(tensor.dtype)
    if bits is None:
        return tensor
    flipped = tensor.detach().contiguous().view(bits) ^ 1
    return flipped.view(tensor.dtype)


def no_change(tensor: torch.Tensor) -> torch.Tensor:
    return tensor.clone()


def change_value(tensor: torch.Tensor) -> torch.Tensor:
    """Swap the first and last elements: exposes order-dependent accumulation."""
    changed = tensor.clone()
    flat = changed.view(-1)
    if flat.numel() > 1:
        first = flat[0].clone()
        flat[0] = flat[-1]
        flat[-1] = first
    return changed


def to_cpu(tensor: torch.Tensor) -> torch.Tensor:
    return tensor.cpu()


BUILT_IN = [
    Perturbation("improve_precision", improve_precision, "pytorch", "float16/bfloat16 to float32, float32 to float64"),
    Perturbation("add_noise", add_noise, "pytorch", "add a relative noise below the dtype's resolution"),
    Perturbation("bit_noise", bit_noise, "pytorch", "flip the last mantissa bit"),
    Perturbation("no_change", no_change, "pytorch", "run again on a copy"),
    Perturbation("change_value", change_value, "pytorch", "swap the first and last elements"),
    Perturbation("to_cpu", to_cpu, "pytorch", "run on the CPU"),
]


def _writes_in_place(key: str, args: tuple, kwargs: dict) -> bool:
    """In-place calls (add_, x[i] = y, inplace=True, out=) cannot be run a second time."""
    api = key.rsplit(".", 1)[-1]
    if (api.endswith("_") and not api.endswith("__")) or api.startswith("__i") or api == "__setitem__":
        return True
    if "out" in kwargs or kwargs.get("inplace") is True:
        return True
    return key.startswith("Functional.") and any(arg is True for arg in args[1:])  # F.relu(x, True) etc.


def _floating(value: Any) -> bool:
    return isinstance(value, torch.Tensor) and value.is_floating_point()


def _map_tensors(value: Any, function: Callable[[torch.Tensor], torch.Tensor]) -> Any:
    if _floating(value):
        return function(value)
    if isinstance(value, (list, tuple)) and not hasattr(value, "_fields"):
        return type(value)(_map_tensors(item, function) for item in value)
    if isinstance(value, dict):
        return {key: _map_tensors(item, function) for key, item in value.items()}
    return value


def _outputs(value: Any) -> list[torch.Tensor | None]:
    if isinstance(value, torch.Tensor):
        return [value]
    if isinstance(value, (list, tuple)):
        return [item if isinstance(item, torch.Tensor) else None for item in value]
    return []


def _first_floating_input(args: tuple, kwargs: dict) -> torch.Tensor | None:
    for value in list(args) + list(kwargs.values()):
        if _floating(value):
            return value
        if isinstance(value, (list, tuple)):
            for item in value:
                if _floating(item):
                    return item
    return None


class FreeBenchmarkHooks:
    """TaskHooks for task free_benchmark on PyTorch."""

    def __init__(self, session: TaskSession, perturbation: Perturbation):
        self.session = session
        section = session.config.free_benchmark
        self.section = section
        self.perturb = perturbation.function
        self.fix = section.handler_type == "fix"
        self.stage = section.fuzz_stage
        self.judge = FreeBenchmarkJudge(
            session.config.dump_path,
            section.pert_mode,
            preheat_steps=section.preheat_step if section.if_preheat else 0,
            max_sample=section.max_sample,
        )
        self.counts: dict[str, int] = {}
        self.patcher = ApiPatcher(self._call, selected=self._selected_api)
        self.state = self.patcher.state
        self._warned: set[str] = set()

    # -- TaskHooks --------------------------------------------------------------------
    def install(self) -> None:
        self.patcher.install()

    def remove(self) -> None:
        self.patcher.remove()

    def end_step(self) -> None:
        self.counts.clear()

    # -- selection --------------------------------------------------------------------
    def _selected_api(self, key: str) -> bool:
        if any(marker in key for marker in _NOT_REPEATABLE):
            return False
        if self.section.api_list:
            return any(item in key for item in self.section.api_list)
        return True

    def _selected_call(self, name: str) -> bool:
        return not self.section.scope or name in self.section.scope

    # -- the re-run ----------------------------------------------------------------------
    def _call(self, original: Callable, key: str, args: tuple, kwargs: dict) -> Any:
        state = self.state
        state.busy = True
        try:
            index = self.counts.get(key, 0)
            self.counts[key] = index + 1
            name = f"{key}.{index}.forward"
            if (
                _writes_in_place(key, args, kwargs)
                or not self._selected_call(name)
                or _first_floating_input(args, kwargs) is None
            ):
                return original(*args, **kwargs)
            if self.stage == "backward":
                return self._backward_check(original, name, args, kwargs)
            return self._forward_check(original, name, args, kwargs)
        finally:
            state.busy = False

    def _forward_check(self, original: Callable, name: str, args: tuple, kwargs: dict) -> Any:
        try:
            with torch.no_grad() if not self.fix else torch.enable_grad():
                perturbed_args = _map_tensors(args, self.perturb)
                perturbed_kwargs = _map_tensors(kwargs, self.perturb)
        except Exception as exc:
            self._warn(name, f"the perturbation failed ({exc})")
            return original(*args, **kwargs)
        output = original(*args, **kwargs)
        try:
            if self.fix:
                perturbed = original(*perturbed_args, **perturbed_kwargs)
                return self._fixed(output, perturbed)
            with torch.no_grad():
                perturbed = original(*perturbed_args, **perturbed_kwargs)
            self._compare(name, output, perturbed, "forward", _first_floating_input(args, kwargs))
        except Exception as exc:
            self._warn(name, f"the perturbed run failed ({exc.__class__.__name__}: {exc})")
        return output

    def _backward_check(self, original: Callable, name: str, args: tuple, kwargs: dict) -> Any:
        output = original(*args, **kwargs)
        tensors = [t for t in _outputs(output) if t is not None and t.requires_grad]
        if not tensors:
            return output
        detached_args = _map_tensors(args, lambda t: t.detach())
        detached_kwargs = _map_tensors(kwargs, lambda t: t.detach())
        reference_input = _first_floating_input(args, kwargs)

        def on_grad(grad: torch.Tensor) -> None:
            self._compare_gradients(original, name, detached_args, detached_kwargs, grad, reference_input)

        tensors[0].register_hook(on_grad)
        return output

    def _compare_gradients(
        self, original: Callable, name: str, args: tuple, kwargs: dict, grad: torch.Tensor, reference: Any
    ) -> None:
        busy = self.state.busy
        self.state.busy = True
        try:
            grads = []
            for transform in (lambda t: t, self.perturb):
                with torch.enable_grad():
                    leaves: list[torch.Tensor] = []

                    def leaf(t: torch.Tensor, transform: Callable = transform, found: list = leaves) -> torch.Tensor:
                        value = transform(t.clone()).detach().requires_grad_(True)
                        found.append(value)
                        return value

                    run_args, run_kwargs = _map_tensors(args, leaf), _map_tensors(kwargs, leaf)
                    out = _outputs(original(*run_args, **run_kwargs))[0]
                    found = torch.autograd.grad(out, leaves, grad.to(out.dtype), allow_unused=True)
                grads.append(found)
            for index, (plain, moved) in enumerate(zip(*grads)):
                if plain is not None and moved is not None:
                    self._judge(name.replace(".forward", ".backward"), plain, moved, "backward", reference, index)
        except Exception as exc:
            self._warn(name, f"the backward check failed ({exc.__class__.__name__}: {exc})")
        finally:
            self.state.busy = busy

    def _compare(self, name: str, output: Any, perturbed: Any, stage: str, reference: Any) -> None:
        plain, moved = _outputs(output), _outputs(perturbed)
        several = len(plain) > 1
        for index, (a, b) in enumerate(zip(plain, moved)):
            if a is None or b is None or not a.is_floating_point():
                continue
            self._judge(name, a, b, stage, reference, index if several else None)

    def _judge(self, name: str, a: torch.Tensor, b: torch.Tensor, stage: str, reference: Any, index: Any) -> None:
        original = a.detach().to("cpu", torch.float64).numpy()
        perturbed = b.detach().to("cpu", torch.float64).numpy()
        source = reference if isinstance(reference, torch.Tensor) else a
        self.judge.judge(
            api=name,
            original=np.asarray(original),
            perturbed=np.asarray(perturbed),
            dtype=dtype_key(source.dtype),
            shape=list(source.shape),
            step=self.session.step,
            rank=self.session.rank or 0,
            stage=stage,
            output_index=index,
        )

    def _fixed(self, output: Any, perturbed: Any) -> Any:
        """Hand the training the perturbed result, in the dtype and device it expects."""
        if isinstance(output, torch.Tensor) and isinstance(perturbed, torch.Tensor):
            return perturbed.to(output.dtype).to(output.device)
        if isinstance(output, (list, tuple)) and isinstance(perturbed, (list, tuple)):
            items = [self._fixed(a, b) for a, b in zip(output, perturbed)]
            return type(output)(items) if not hasattr(output, "_fields") else type(output)(*items)
        return output

    def _warn(self, name: str, reason: str) -> None:
        base = name.rsplit(".", 2)[0]
        if base not in self._warned:
            self._warned.add(base)
            logger.warning("msprobe free benchmark: %s: %s; it is skipped", name, reason)


def make_hooks(session: TaskSession, perturbations: dict[str, Perturbation]) -> FreeBenchmarkHooks:
    mode = session.config.free_benchmark.pert_mode
    if mode not in perturbations:
        known = ", ".join(sorted(perturbations))
        raise UsageError(f"free_benchmark.pert_mode '{mode}' is not provided by any installed plugin ({known})")
    return FreeBenchmarkHooks(session, perturbations[mode])
