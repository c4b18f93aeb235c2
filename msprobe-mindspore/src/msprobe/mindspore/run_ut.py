"""run_ut on MindSpore: re-run each dumped mint/ops/Tensor API, and judge it against a benchmark.

The tested side is MindSpore in the dumped dtypes. The benchmark is the
same API in PyTorch on the CPU in float64 when torch is installed (through
the MindSpore-to-PyTorch API table), otherwise MindSpore itself with
float64 inputs. Inputs come from the dump's .npy files or are generated
from its statistics with a generator seeded by the API's name. Forward
outputs are checked; a call that cannot be rebuilt or run is a SKIP row.
"""

from __future__ import annotations

import importlib
import importlib.util
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

import mindspore as ms
from msprobe.core.compare.mapping import default_api_mapping
from msprobe.core.dump.reader import Dump
from msprobe.core.free_benchmark import NOT_REPEATABLE
from msprobe.core.precheck.metrics import PASS, SKIP, Detail, compare_output, overall
from msprobe.core.precheck.rebuild import Unsupported, bound, decode, rebuild_call, seeded_rng
from msprobe.core.trees import map_leaves
from msprobe.mindspore.dump.tensors import to_numpy

NOT_CHECKED = NOT_REPEATABLE  # random or non-repeatable APIs are not checked
ROOTS = {"Mint": "mindspore.mint", "MintFunctional": "mindspore.mint.nn.functional", "Functional": "mindspore.ops"}
_NUMPY_DTYPES = {
    "Float16": np.float16,
    "Float32": np.float32,
    "Float64": np.float64,
    "BFloat16": np.float32,
    "Int8": np.int8,
    "Int16": np.int16,
    "Int32": np.int32,
    "Int64": np.int64,
    "UInt8": np.uint8,
    "Bool": np.bool_,
}


def _mindspore_object(kind: str, encoded: dict) -> Any:
    if kind == "mindspore.dtype":
        return getattr(ms, str(encoded.get("value")).lower(), None)
    raise Unsupported(f"arguments of type {kind} cannot be rebuilt")


def resolve(name: str) -> tuple[Callable, str]:
    parts = name.split(".")
    prefix, api = parts[0], ".".join(parts[1:-2])
    if prefix == "Tensor":
        function = getattr(ms.Tensor, api, None)
    elif prefix in ROOTS:
        function = importlib.import_module(ROOTS[prefix])
        for part in api.split("."):
            function = getattr(function, part, None)
            if function is None:
                break
    else:
        raise Unsupported(f"{prefix} APIs are not re-run")
    if function is None:
        raise Unsupported(f"{prefix}.{api} does not exist in mindspore {ms.__version__}")
    return function, f"{prefix}.{api}"


def torch_twin(key: str) -> Callable | None:
    """The PyTorch API for a MindSpore one, or None (then MindSpore in float64 is the benchmark)."""
    spec = importlib.util.find_spec("torch")
    if spec is None or spec.origin is None:  # not installed (or only a folder named torch on the path)
        return None
    import torch

    prefix, api = key.split(".", 1)
    mapped = {"Mint": f"Torch.{api}", "MintFunctional": f"Functional.{api}", "Tensor": f"Tensor.{api}"}.get(prefix)
    mapped = default_api_mapping().get(key, mapped)
    if mapped is None:
        return None
    torch_prefix, torch_api = mapped.split(".", 1)
    root = {"Torch": torch, "Functional": torch.nn.functional, "Tensor": torch.Tensor}.get(torch_prefix)
    return getattr(root, torch_api, None) if root is not None else None


class InputBuilder:
    def __init__(self, dump: Dump, seed_name: str):
        self.dump = dump
        self.folder = dump.tensor_dir()
        self.rng = seeded_rng(seed_name)

    def value(self, encoded: Any) -> Any:
        return decode(encoded, self.array, _mindspore_object)

    def array(self, summary: dict) -> np.ndarray:
        name = summary.get("data_name")
        if name and self.folder is not None and (path := self.dump.tensor_file(name)) is not None:
            return np.load(path, allow_pickle=False)
        dtype = _NUMPY_DTYPES.get(summary.get("dtype", ""))
        if dtype is None:
            raise Unsupported(f"cannot generate a {summary.get('dtype')} tensor")
        shape = [int(s) for s in summary.get("shape", [])]
        high, low = bound(summary.get("Max"), 1.0), bound(summary.get("Min"), -1.0)
        if dtype is np.bool_:
            return self.rng.random(shape) < 0.5
        if np.issubdtype(dtype, np.integer):
            return self.rng.integers(int(np.floor(low)), int(np.floor(high)) + 1, size=shape).astype(dtype)
        values = self.rng.random(shape) * (high - low) + low
        flat = values.reshape(-1)
        if flat.size >= 2:
            flat[0], flat[-1] = high, low
        return values.astype(dtype)


def _map(value: Any, function: Callable[[np.ndarray], Any]) -> Any:
    return map_leaves(value, lambda v: isinstance(v, np.ndarray), function)


def _outputs(value: Any) -> list[Any]:
    if isinstance(value, (list, tuple)):
        return [item for item in value if item is not None and hasattr(item, "shape")]
    return [value] if hasattr(value, "shape") else []


class ApiRunner:
    """The runner the core driver uses (see msprobe.core.precheck.driver)."""

    def __init__(self, dump: Dump, device: str = "cpu", save_error_data: bool = False):
        self.dump = dump
        self.save_error_data = save_error_data

    def forward_names(self) -> list[str]:
        return [n for n in self.dump.data if n.endswith(".forward") and n.split(".")[0] in (*ROOTS, "Tensor")]

    def run(self, name: str) -> Any:
        from msprobe.core.precheck.driver import Outcome

        if any(marker in name for marker in NOT_CHECKED):
            return Outcome(name, SKIP, "", "random or non-repeatable API: not checked")
        try:
            function, key = resolve(name)
            args, kwargs, grad_outputs = rebuild_call(self.dump, name, InputBuilder(self.dump, name).value)
        except Unsupported as exc:
            return Outcome(name, SKIP, "", str(exc))
        except Exception as exc:
            return Outcome(name, SKIP, "", f"cannot rebuild the call: {type(exc).__name__}: {exc}")
        try:
            device = _outputs(function(*_map(args, ms.Tensor), **_map(kwargs, ms.Tensor)))
            bench = self._benchmark(function, key, args, kwargs)
        except Exception as exc:
            return Outcome(name, SKIP, "", f"the call failed: {type(exc).__name__}: {exc}")
        outcome = Outcome(name, PASS, "", "")
        for index, (tested, expected) in enumerate(zip(device, bench)):
            outcome.details.append(self._detail(f"{name}.output.{index}", key, expected, tested))
        outcome.forward = overall([d.status for d in outcome.details]) or SKIP
        grads = [g for g in (grad_outputs or []) if isinstance(g, np.ndarray)]
        if grads and not key.endswith("_"):  # in-place calls are not differentiated, as on PyTorch
            try:
                rows = self._backward(name, function, key, args, kwargs, grads)
            except Exception as exc:
                outcome.message = f"backward not checked: {type(exc).__name__}: {exc}"
                rows = []
            outcome.details.extend(rows)
            outcome.backward = overall([d.status for d in rows])
        return outcome

    def _backward(
        self, name: str, function: Callable, key: str, args: list, kwargs: dict, grads: list[np.ndarray]
    ) -> list[Detail]:
        """Gradients of the floating tensor arguments for the dumped output gradients, tested against bench."""
        positions = [i for i, a in enumerate(args) if isinstance(a, np.ndarray) and np.issubdtype(a.dtype, np.floating)]
        if not positions:
            return []
        tested = _input_gradients(function, args, kwargs, positions, grads, widen=False)
        twin = torch_twin(key)
        if twin is not None:
            bench = _torch_input_gradients(twin, args, kwargs, positions, grads)
        else:
            bench = _input_gradients(function, args, kwargs, positions, grads, widen=True)
        backward_name = name[: -len("forward")] + "backward"
        return [
            self._detail(f"{backward_name}.output.{index}", key, expected, ms.Tensor(got))
            for index, (got, expected) in enumerate(zip(tested, bench))
            if got is not None and expected is not None
        ]

    def _benchmark(self, function: Callable, key: str, args: Any, kwargs: Any) -> list[np.ndarray]:
        def widen(array: np.ndarray) -> np.ndarray:
            return array.astype(np.float64) if np.issubdtype(array.dtype, np.floating) else array

        twin = torch_twin(key)
        if twin is not None:
            import torch

            outputs = twin(
                *_map(args, lambda a: torch.from_numpy(widen(a))), **_map(kwargs, lambda a: torch.from_numpy(widen(a)))
            )
            return [o.detach().numpy() for o in _outputs(outputs)]
        outputs = function(*_map(args, lambda a: ms.Tensor(widen(a))), **_map(kwargs, lambda a: ms.Tensor(widen(a))))
        return [to_numpy(o) for o in _outputs(outputs)]

    @staticmethod
    def _detail(row_name: str, key: str, bench: np.ndarray, tested: Any) -> Detail:
        return compare_output(
            row_name, key, np.asarray(bench), to_numpy(tested), str(np.asarray(bench).dtype), str(tested.dtype)
        )


def _widened(array: np.ndarray) -> np.ndarray:
    return array.astype(np.float64) if np.issubdtype(array.dtype, np.floating) else array


def _input_gradients(
    function: Callable, args: list, kwargs: dict, positions: list[int], grads: list[np.ndarray], widen: bool
) -> list[np.ndarray | None]:
    """MindSpore's vector-Jacobian product of ``function`` at ``args`` for the output gradients ``grads``."""
    convert = (lambda a: ms.Tensor(_widened(a))) if widen else ms.Tensor
    full = list(_map(list(args), convert))
    named = _map(kwargs, convert)

    def call(*inputs: Any) -> Any:
        call_args = list(full)
        for position, value in zip(positions, inputs):
            call_args[position] = value
        return function(*call_args, **named)

    outputs, vjp = ms.vjp(call, *[full[p] for p in positions])
    listed = list(outputs) if isinstance(outputs, (tuple, list)) else [outputs]
    sens = [
        ms.Tensor(grads[i].astype(to_numpy(o).dtype)) if i < len(grads) else ms.ops.zeros_like(o)
        for i, o in enumerate(listed)
    ]
    result = vjp(tuple(sens) if isinstance(outputs, (tuple, list)) else sens[0])
    result = list(result) if isinstance(result, (tuple, list)) else [result]
    return [to_numpy(g) if g is not None else None for g in result]


def _torch_input_gradients(
    twin: Callable, args: list, kwargs: dict, positions: list[int], grads: list[np.ndarray]
) -> list[np.ndarray | None]:
    """The same gradients from the PyTorch twin on the CPU in float64."""
    import torch

    torch_args = list(_map(list(args), lambda a: torch.from_numpy(_widened(a))))
    for position in positions:
        torch_args[position].requires_grad_(True)
    outputs = _outputs(twin(*torch_args, **_map(kwargs, lambda a: torch.from_numpy(_widened(a)))))
    pairs = [(o, torch.from_numpy(_widened(g))) for o, g in zip(outputs, grads) if o.requires_grad]
    torch.autograd.backward([o for o, _ in pairs], [g.to(o.dtype) for o, g in pairs])
    return [torch_args[p].grad.numpy() if torch_args[p].grad is not None else None for p in positions]


def save_error_data(folder: Path, data: dict[str, np.ndarray]) -> None:
    from msprobe.core.files import make_dir, new_file

    make_dir(folder)
    for file_name, array in data.items():
        with new_file(folder / file_name) as handle:
            np.save(handle, array, allow_pickle=False)
