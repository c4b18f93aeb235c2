"""run_ut on PyTorch: re-run every dumped API in the tested precision and in float64, and judge.

The tested side runs on the dump's device when it is present (``-d``),
otherwise on the CPU, in the dumped dtypes; the benchmark always runs on
the CPU with floating inputs in float64. Inputs come from the tensor files
of a tensor dump, or are generated from a statistics dump's dtype, shape,
Max and Min with a generator seeded by the API's name, so a resumed run
sees the same inputs. Every API that cannot be rebuilt or run becomes a
SKIP row with the reason; nothing stops the whole run.
"""

from __future__ import annotations

import importlib
import logging
import sys
import zlib
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import torch

from msprobe.core.dump.reader import Dump
from msprobe.core.free_benchmark import NOT_REPEATABLE
from msprobe.core.precheck.driver import Outcome
from msprobe.core.precheck.metrics import ERROR, PASS, SKIP, Detail, compare_output, overall
from msprobe.core.precheck.rebuild import Unsupported, bound, decode, rebuild_call
from msprobe.pytorch.tensor_io import map_tensors, tensor_to_numpy, tensors_in

logger = logging.getLogger(__name__)

NOT_CHECKED = NOT_REPEATABLE  # random or non-repeatable APIs are not checked
_DTYPES = {
    str(d): d
    for d in (
        torch.float16,
        torch.bfloat16,
        torch.float32,
        torch.float64,
        torch.int8,
        torch.uint8,
        torch.int16,
        torch.int32,
        torch.int64,
        torch.bool,
        torch.complex64,
        torch.complex128,
    )
}


def _torch_object(kind: str, encoded: dict) -> Any:
    raw = encoded.get("value")
    if kind == "torch.dtype":
        return getattr(torch, str(raw).split(".")[-1])
    if kind == "torch.device":
        return torch.device(raw)
    if kind == "torch.Size":
        return torch.Size(raw)
    if kind == "torch.memory_format":
        return getattr(torch, encoded.get("format", "preserve_format"))
    raise Unsupported(f"arguments of type {kind} cannot be rebuilt")


ApiOutcome = Outcome  # the core driver's result type


def resolve(name: str) -> Callable:
    """'Functional.relu.0.forward' -> torch.nn.functional.relu (Tensor methods are unbound)."""
    parts = name.split(".")
    prefix, api = parts[0], ".".join(parts[1:-2])
    if prefix == "Functional":
        root: Any = torch.nn.functional
    elif prefix == "Torch":
        root = torch
    elif prefix == "Tensor":
        root = torch.Tensor
    elif prefix == "NPU":
        if "torch_npu" not in sys.modules and importlib.util.find_spec("torch_npu") is None:
            raise Unsupported("torch_npu is not installed")
        root = importlib.import_module("torch_npu")
    else:
        raise Unsupported(f"{prefix} APIs are not re-run")
    function = root
    for part in api.split("."):
        function = getattr(function, part, None)
        if function is None:
            raise Unsupported(f"{prefix}.{api} does not exist in torch {torch.__version__}")
    return function


class InputBuilder:
    """Turns dump.json values back into call arguments."""

    def __init__(self, dump: Dump, seed_name: str):
        self.dump = dump
        self.folder = dump.tensor_dir() if not dump.arrays else None
        self.arrays = dump.arrays
        self.generator = torch.Generator().manual_seed(zlib.crc32(seed_name.encode()))

    def value(self, encoded: Any) -> Any:
        return decode(encoded, self.tensor, _torch_object)

    def tensor(self, summary: dict) -> torch.Tensor:
        name = summary.get("data_name")
        dtype = _DTYPES.get(summary.get("dtype", ""))
        if name and name in self.arrays:  # online pre-check: the tensor came over the wire
            tensor = torch.from_numpy(np.array(self.arrays[name]))
            tensor = tensor.to(dtype) if dtype is not None and tensor.dtype != dtype else tensor
        elif name and self.folder is not None and (path := self.dump.tensor_file(name)) is not None:
            tensor = torch.load(path, map_location="cpu", weights_only=True)
        else:
            tensor = self.generate(summary)
        return tensor.requires_grad_(bool(summary.get("requires_grad"))) if tensor.is_floating_point() else tensor

    def generate(self, summary: dict) -> torch.Tensor:
        dtype = _DTYPES.get(summary.get("dtype", ""))
        if dtype is None:
            raise Unsupported(f"cannot generate a {summary.get('dtype')} tensor")
        shape = [int(s) for s in summary.get("shape", [])]
        count = int(np.prod(shape)) if shape else 1
        high, low = bound(summary.get("Max"), 1.0), bound(summary.get("Min"), -1.0)
        if dtype == torch.bool:
            values = torch.rand(count, generator=self.generator) < 0.5
            if count:
                values[0] = bool(summary.get("Max", True))
                values[-1] = bool(summary.get("Min", False)) if count > 1 else values[0]
            return values.reshape(shape)
        if not dtype.is_floating_point and not dtype.is_complex:
            lower, upper = int(np.floor(low)), int(np.floor(high))
            return (
                torch.randint(lower, max(upper, lower) + 1, (count,), generator=self.generator).to(dtype).reshape(shape)
            )
        values = torch.rand(count, generator=self.generator, dtype=torch.float64) * (high - low) + low
        if count >= 2:  # hit the recorded extremes exactly
            values[0], values[-1] = high, low
        return values.to(dtype).reshape(shape)


def prepare_inputs(args: Any, device: str, bench: bool) -> Any:
    """A copy of the arguments for one side: float64 on the CPU for the benchmark."""

    def convert(tensor: torch.Tensor) -> torch.Tensor:
        grad = tensor.requires_grad
        copy = tensor.detach()
        if bench:
            copy = copy.to("cpu", torch.float64) if copy.is_floating_point() else copy.to("cpu")
        else:
            copy = copy.to(device)
        copy = copy.clone()
        return copy.requires_grad_(grad) if copy.is_floating_point() else copy

    return map_tensors(args, convert)


def _no_grad(tensor: torch.Tensor) -> torch.Tensor:
    return tensor.detach() if tensor.requires_grad else tensor


def _is_inplace(name: str) -> bool:
    api = name.split(".")[-3]
    return (api.endswith("_") and not api.endswith("__")) or api.startswith("__i") or api == "__setitem__"


def _numpy(tensor: torch.Tensor) -> np.ndarray:
    return tensor_to_numpy(tensor.detach().cpu())


class ApiRunner:
    def __init__(self, dump: Dump, device: str = "cpu", save_error_data: bool = False):
        self.dump = dump
        self.device = device
        self.save_error_data = save_error_data
        if device == "cpu":
            # one intra-op thread: a CPU result then does not depend on the core count, nor on which process or
            # cluster worker (Ray starts them with one) checked the API, and split processes do not oversubscribe
            torch.set_num_threads(1)

    def forward_names(self) -> list[str]:
        return [name for name in self.dump.data if name.endswith(".forward") and not name.startswith("Module.")]

    def run(self, name: str) -> ApiOutcome:
        if any(marker in name for marker in NOT_CHECKED):
            return ApiOutcome(name, SKIP, "", "random or non-repeatable API: not checked")
        try:
            function = resolve(name)
            args, kwargs, grad_outputs = rebuild_call(self.dump, name, InputBuilder(self.dump, name).value)
        except Unsupported as exc:
            return ApiOutcome(name, SKIP, "", str(exc))
        except Exception as exc:
            return ApiOutcome(name, SKIP, "", f"cannot rebuild the call: {type(exc).__name__}: {exc}")
        try:
            return self._compare(name, function, args, kwargs, grad_outputs)
        except Exception as exc:
            return ApiOutcome(name, SKIP, "", f"the call failed: {type(exc).__name__}: {exc}")

    def _side(self, function: Callable, args: Any, kwargs: Any, bench: bool, inplace: bool) -> tuple[Any, Any, Any]:
        side_args = prepare_inputs(args, self.device, bench)
        side_kwargs = prepare_inputs(kwargs, self.device, bench)
        if inplace:  # as in training (optimizer updates): no autograd through in-place calls on leaves
            side_args, side_kwargs = map_tensors(side_args, _no_grad), map_tensors(side_kwargs, _no_grad)
            with torch.no_grad():
                return side_args, side_kwargs, function(*side_args, **side_kwargs)
        return side_args, side_kwargs, function(*side_args, **side_kwargs)

    def _compare(self, name: str, function: Callable, args: Any, kwargs: Any, grad_outputs: Any) -> ApiOutcome:
        inplace = _is_inplace(name)
        device_args, device_kwargs, device_out = self._side(function, args, kwargs, False, inplace)
        bench_args, bench_kwargs, bench_out = self._side(function, args, kwargs, True, inplace)
        outcome = ApiOutcome(name, PASS, "", "")
        device_outputs, bench_outputs = tensors_in(device_out), tensors_in(bench_out)
        if not device_outputs and not isinstance(device_out, (int, float, bool)):
            return ApiOutcome(name, SKIP, "", "the API returned no tensor to compare")
        if not device_outputs:
            device_outputs, bench_outputs = [torch.tensor(device_out)], [torch.tensor(bench_out)]
        for index, (device, bench) in enumerate(zip(device_outputs, bench_outputs)):
            outcome.details.append(self._detail(f"{name}.output.{index}", name, bench, device))
        outcome.forward = overall([d.status for d in outcome.details])
        if grad_outputs and not inplace:
            outcome.backward = self._backward(
                outcome,
                name,
                grad_outputs,
                device_args,
                device_kwargs,
                device_outputs,
                bench_args,
                bench_kwargs,
                bench_outputs,
            )
        if self.save_error_data and ERROR in (outcome.forward, outcome.backward):
            outcome.error_data = self._error_data(name, device_args, bench_args, device_outputs, bench_outputs)
        return outcome

    def _backward(
        self,
        outcome: ApiOutcome,
        name: str,
        grad_outputs: Any,
        device_args: Any,
        device_kwargs: Any,
        device_outputs: list,
        bench_args: Any,
        bench_kwargs: Any,
        bench_outputs: list,
    ) -> str:
        grads = [g for g in tensors_in(grad_outputs)]
        pairs = [(o, g) for o, g in zip(device_outputs, grads) if o.requires_grad and g is not None]
        bench_pairs = [(o, g) for o, g in zip(bench_outputs, grads) if o.requires_grad and g is not None]
        if not pairs:
            return ""
        device_inputs = [t for t in tensors_in((device_args, device_kwargs)) if t.requires_grad]
        bench_inputs = [t for t in tensors_in((bench_args, bench_kwargs)) if t.requires_grad]
        torch.autograd.backward([o for o, _ in pairs], [g.to(o.device, o.dtype) for o, g in pairs])
        torch.autograd.backward([o for o, _ in bench_pairs], [g.to("cpu", o.dtype) for o, g in bench_pairs])
        backward_name = name[: -len("forward")] + "backward"
        rows = []
        for index, (device, bench) in enumerate(zip(device_inputs, bench_inputs)):
            if device.grad is None or bench.grad is None:
                continue
            rows.append(self._detail(f"{backward_name}.output.{index}", name, bench.grad, device.grad))
        outcome.details.extend(rows)
        return overall([d.status for d in rows])

    def _detail(self, row_name: str, api: str, bench: torch.Tensor, device: torch.Tensor) -> Detail:
        api_kind = ".".join(api.split(".")[:2])
        return compare_output(row_name, api_kind, _numpy(bench), _numpy(device), str(bench.dtype), str(device.dtype))

    @staticmethod
    def _error_data(name: str, device_args: Any, bench_args: Any, device_out: list, bench_out: list) -> dict:
        data: dict[str, torch.Tensor] = {}
        for index, tensor in enumerate(tensors_in(device_args)):
            data[f"{name}.input.{index}.pt"] = tensor.detach().cpu()
        for side, outputs in (("device", device_out), ("bench", bench_out)):
            for index, tensor in enumerate(outputs):
                data[f"{name}.{side}.output.{index}.pt"] = tensor.detach().cpu()
        return data


def save_error_data(folder: Path, data: dict[str, torch.Tensor]) -> None:
    from msprobe.core.files import make_dir, new_file

    make_dir(folder)
    for file_name, tensor in data.items():
        with new_file(folder / file_name) as handle:
            torch.save(tensor.clone(), handle)
