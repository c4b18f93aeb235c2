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
from msprobe.core.free_benchmark import FreeBenchmarkCalls, chosen_perturbation
from msprobe.core.recording.session import TaskSession
from msprobe.core.trees import map_leaves
from msprobe.pytorch import func_transforms
from msprobe.pytorch.api_patch import ApiPatcher
from msprobe.pytorch.compiled import EagerWhileOn
from msprobe.pytorch.dump.special_tensors import nested_values, padded_shape

logger = logging.getLogger(__name__)

_HIGHER = {torch.float16: torch.float32, torch.bfloat16: torch.float32, torch.float32: torch.float64}
_NOISE = {torch.float16: 2**-11, torch.bfloat16: 2**-9, torch.float32: 2**-22, torch.float64: 2**-50}
_BITS = {
    torch.float16: torch.int16,
    torch.bfloat16: torch.int16,
    torch.float32: torch.int32,
    torch.float64: torch.int64,
}


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
    changed = tensor.clone(memory_format=torch.contiguous_format)  # a transposed input is not one flat view
    flat = changed.view(-1)
    if flat.numel() > 1:
        first = flat[0].clone()
        flat[0] = flat[-1]
        flat[-1] = first
    return changed


def to_cpu(tensor: torch.Tensor) -> torch.Tensor:
    return tensor.cpu()


BUILT_IN = [
    Perturbation(
        "improve_precision", improve_precision, "pytorch", "float16/bfloat16 to float32, float32 to float64", fix=True
    ),
    Perturbation("add_noise", add_noise, "pytorch", "add a relative noise below the dtype's resolution"),
    Perturbation("bit_noise", bit_noise, "pytorch", "flip the last mantissa bit"),
    Perturbation("no_change", no_change, "pytorch", "run again on a copy"),
    Perturbation("change_value", change_value, "pytorch", "swap the first and last elements"),
    Perturbation("to_cpu", to_cpu, "pytorch", "run on the CPU", fix=True),
]


def _floating(value: Any) -> bool:
    return isinstance(value, torch.Tensor) and value.is_floating_point()


def _map_tensors(value: Any, function: Callable[[torch.Tensor], torch.Tensor]) -> Any:
    return map_leaves(value, _floating, function)


def _componentwise(function: Callable[[torch.Tensor], torch.Tensor]) -> Callable[[torch.Tensor], torch.Tensor]:
    """``function`` applied to each component of a nested tensor (most perturbations need a plain one)."""

    def perturb(tensor: torch.Tensor) -> torch.Tensor:
        if not tensor.is_nested:
            return function(tensor)
        parts = [function(component) for component in tensor.unbind()]
        return torch.nested.as_nested_tensor(parts, layout=tensor.layout)

    return perturb


def _outputs(value: Any) -> list[torch.Tensor | None]:
    if isinstance(value, torch.Tensor):
        return [value]
    if isinstance(value, (list, tuple)):
        return [item if isinstance(item, torch.Tensor) else None for item in value]
    return []


class FreeBenchmarkHooks(FreeBenchmarkCalls):
    """TaskHooks for task free_benchmark on PyTorch: the core's call handling plus torch tensors."""

    def __init__(self, session: TaskSession, perturbation: Perturbation):
        super().__init__(session, perturbation.function)
        self.patcher = ApiPatcher(self.handle, selected=self.selected_api)
        self.state = self.patcher.state
        self.eager = EagerWhileOn([self.patcher])

    def install(self) -> None:
        self.eager.on()  # compiled code would run the perturbed APIs unseen
        super().install()

    def remove(self) -> None:
        super().remove()
        self.eager.off()

    # -- torch tensors --------------------------------------------------------------------
    def is_floating(self, value: Any) -> bool:
        return _floating(value)

    def map_tensors(self, value: Any, function: Callable) -> Any:
        function = _componentwise(function)
        if self.fix:
            return _map_tensors(value, function)  # keep autograd: the training uses this result
        with torch.no_grad():
            return _map_tensors(value, function)

    def outputs(self, value: Any) -> list:
        return _outputs(value)

    def to_float64(self, tensor: Any) -> np.ndarray:
        if func_transforms.wrapped(tensor):  # inside torch.func.vmap/grad: every sample
            with func_transforms.plain_dispatch():
                return self.to_float64(func_transforms.physical(tensor))
        if tensor.is_nested:  # the values it holds, components one after another
            tensor = nested_values(tensor)
        return np.asarray(tensor.detach().to("cpu", torch.float64).numpy())

    def shape_of(self, tensor: Any) -> list:
        if tensor.is_nested:
            return padded_shape(tensor)
        return list(func_transforms.physical(tensor).shape)

    def cast_like(self, perturbed: Any, original: Any) -> Any:
        return perturbed.to(original.dtype).to(original.device)

    def no_grad(self) -> Any:
        return torch.no_grad()

    # -- backward stage -------------------------------------------------------------------
    def backward_check(self, original: Callable, name: str, args: tuple, kwargs: dict) -> Any:
        output = original(*args, **kwargs)
        tensors = [t for t in _outputs(output) if t is not None and t.requires_grad]
        if not tensors:
            return output
        detached_args = _map_tensors(args, lambda t: t.detach())
        detached_kwargs = _map_tensors(kwargs, lambda t: t.detach())
        reference_input = self.first_floating(args, kwargs)

        def on_grad(grad: torch.Tensor) -> None:
            self._compare_gradients(original, name, detached_args, detached_kwargs, grad, reference_input)

        tensors[0].register_hook(on_grad)
        return output

    def _compare_gradients(
        self, original: Callable, name: str, args: tuple, kwargs: dict, grad: torch.Tensor, reference: Any
    ) -> None:
        def input_gradients(transform: Callable) -> tuple:
            with torch.enable_grad():
                leaves: list[torch.Tensor] = []

                def leaf(t: torch.Tensor) -> torch.Tensor:
                    value = transform(t.clone()).detach().requires_grad_(True)
                    leaves.append(value)
                    return value

                out = _outputs(original(*_map_tensors(args, leaf), **_map_tensors(kwargs, leaf)))[0]
                return torch.autograd.grad(out, leaves, grad.to(out.dtype), allow_unused=True)

        self.compare_gradients(name, reference, input_gradients)


def make_hooks(session: TaskSession, perturbations: dict[str, Perturbation]) -> FreeBenchmarkHooks:
    return FreeBenchmarkHooks(session, chosen_perturbation(session.config.free_benchmark, perturbations, "pytorch"))
