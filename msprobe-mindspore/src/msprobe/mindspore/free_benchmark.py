"""Free benchmark on MindSpore (PyNative): the core's call handling with MindSpore tensors.

Perturbations improve_precision, add_noise, bit_noise, no_change and
change_value register through the plugin hook (to_cpu is PyTorch-only, as
in the reference). Both stages: forward compares outputs; backward pushes
the gradient that reaches an API's output back through the API with plain
and with perturbed inputs and compares the input gradients.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

import mindspore as ms
from msprobe.core.api_patch import ApiPatcher
from msprobe.core.backend import Perturbation
from msprobe.core.free_benchmark import FreeBenchmarkCalls, chosen_perturbation
from msprobe.core.recording.session import TaskSession
from msprobe.mindspore.dump.recorder import api_targets
from msprobe.mindspore.dump.tensors import to_numpy

_FLOATS = (ms.float16, ms.bfloat16, ms.float32, ms.float64)
_HIGHER = {ms.float16: ms.float32, ms.bfloat16: ms.float32, ms.float32: ms.float64}
_NOISE = {ms.float16: 2**-11, ms.bfloat16: 2**-9, ms.float32: 2**-22, ms.float64: 2**-50}
_BITS = {ms.float16: np.int16, ms.float32: np.int32, ms.float64: np.int64}


def improve_precision(tensor: ms.Tensor) -> ms.Tensor:
    return tensor.astype(_HIGHER.get(tensor.dtype, tensor.dtype))


def add_noise(tensor: ms.Tensor) -> ms.Tensor:
    scale = _NOISE.get(tensor.dtype)
    return tensor if scale is None else tensor + tensor.abs() * scale


def bit_noise(tensor: ms.Tensor) -> ms.Tensor:
    """Flip the last mantissa bit (bfloat16 is not supported, as in the reference)."""
    bits = _BITS.get(tensor.dtype)
    if bits is None:
        return tensor
    host = tensor.asnumpy()
    return ms.Tensor((host.view(bits) ^ 1).view(host.dtype))


def no_change(tensor: ms.Tensor) -> ms.Tensor:
    return tensor.copy()


def change_value(tensor: ms.Tensor) -> ms.Tensor:
    host = tensor.asnumpy().copy()
    flat = host.reshape(-1)
    if flat.size > 1:
        flat[0], flat[-1] = flat[-1], flat[0]
    return ms.Tensor(host, dtype=tensor.dtype)


BUILT_IN = [
    Perturbation(
        "improve_precision",
        improve_precision,
        "mindspore",
        "float16/bfloat16 to float32, float32 to float64",
        fix=True,
    ),
    Perturbation("add_noise", add_noise, "mindspore", "add a relative noise below the dtype's resolution"),
    Perturbation("bit_noise", bit_noise, "mindspore", "flip the last mantissa bit"),
    Perturbation("no_change", no_change, "mindspore", "run again on a copy"),
    Perturbation("change_value", change_value, "mindspore", "swap the first and last elements"),
]


def _map(value: Any, function: Callable) -> Any:
    if isinstance(value, ms.Tensor) and not isinstance(value, ms.Parameter) and value.dtype in _FLOATS:
        return function(value)
    if isinstance(value, ms.Parameter) and value.dtype in _FLOATS:
        return function(ms.Tensor(value))  # never hand a perturbed Parameter to an API
    if isinstance(value, (list, tuple)):
        return type(value)(_map(item, function) for item in value)
    if isinstance(value, dict):
        return {key: _map(item, function) for key, item in value.items()}
    return value


class FreeBenchmarkHooks(FreeBenchmarkCalls):
    def __init__(self, session: TaskSession, perturbation: Perturbation):
        super().__init__(session, perturbation.function)
        self.patcher = ApiPatcher(self.handle, lambda: [t for t in api_targets() if self.selected_api(t[2])])
        self.state = self.patcher.state

    def is_floating(self, value: Any) -> bool:
        return isinstance(value, ms.Tensor) and value.dtype in _FLOATS

    def map_tensors(self, value: Any, function: Callable) -> Any:
        return _map(value, function)

    def outputs(self, value: Any) -> list:
        if isinstance(value, ms.Tensor):
            return [value]
        if isinstance(value, (list, tuple)):
            return [item if isinstance(item, ms.Tensor) else None for item in value]
        return []

    def to_float64(self, tensor: Any) -> np.ndarray:
        return to_numpy(tensor).astype(np.float64)

    def cast_like(self, perturbed: Any, original: Any) -> Any:
        return perturbed.astype(original.dtype)

    # -- backward stage -------------------------------------------------------------------
    def backward_check(self, original: Callable, name: str, args: tuple, kwargs: dict) -> Any:
        """When the output's gradient arrives, push it back through the API with plain and perturbed inputs."""
        output = original(*args, **kwargs)
        first = next((t for t in self.outputs(output) if t is not None and self.is_floating(t)), None)
        positions = [i for i, value in enumerate(args) if self.is_floating(value)]
        if first is None or not positions:
            return output
        plain_args = [ms.Tensor(value) if isinstance(value, ms.Parameter) else value for value in args]
        reference = self.first_floating(args, kwargs)

        def on_grad(grad: ms.Tensor) -> None:
            self._compare_gradients(original, name, plain_args, kwargs, positions, grad, reference)

        first.register_hook(on_grad)
        return output

    def _compare_gradients(
        self,
        original: Callable,
        name: str,
        args: list,
        kwargs: dict,
        positions: list[int],
        grad: ms.Tensor,
        reference: Any,
    ) -> None:
        self.compare_gradients(
            name,
            reference,
            lambda transform: self._input_gradients(original, args, kwargs, positions, grad, transform),
        )

    def _input_gradients(
        self, original: Callable, args: list, kwargs: dict, positions: list[int], grad: ms.Tensor, transform: Callable
    ) -> list[Any]:
        def call(*inputs: Any) -> Any:
            call_args = list(args)
            for position, value in zip(positions, inputs):
                call_args[position] = value
            return self.outputs(original(*call_args, **kwargs))[0]

        inputs = [transform(args[position].copy()) for position in positions]
        output, vjp = ms.vjp(call, *inputs)
        found = vjp(grad.astype(output.dtype))
        return list(found) if isinstance(found, (tuple, list)) else [found]


def make_hooks(session: TaskSession, perturbations: dict[str, Perturbation]) -> FreeBenchmarkHooks:
    return FreeBenchmarkHooks(session, chosen_perturbation(session.config.free_benchmark, perturbations, "mindspore"))
