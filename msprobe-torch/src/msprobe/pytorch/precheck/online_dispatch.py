"""Online dispatch compare: ``with PtdbgDispatch(...):`` checks every ATen op as it runs.

Each ATen op executed inside the context is run again on the CPU with the
same inputs (in float64 when the op already ran on the CPU, so the check
still means something without an accelerator) and the outputs are
compared. An op fails when Cosine < 0.99 and MaxAbsError > 0.001, or
Cosine < 0.9, or MaxAbsError > 1. Results go to
``dump_path/msprobe[_{tag}]_rank{R}_{timestamp}/compare_result_rank{R}_{timestamp}.csv``;
inputs and outputs are kept as ``.npy`` in ``npu/`` and ``cpu/`` according
to ``dump_mode`` (``auto``: failing ops, ``all``, ``list``: ``api_list``,
``OFF``: none). With ``process_num`` > 0 the CPU side runs in worker
processes so the training is not held up by it.
"""

from __future__ import annotations

import functools
import importlib.resources
import logging
import time
from concurrent.futures import Future, ProcessPoolExecutor
from pathlib import Path
from typing import Any

import numpy as np
import torch
import yaml
from torch.utils._python_dispatch import TorchDispatchMode

from msprobe.core import spreadsheet
from msprobe.core.errors import UsageError
from msprobe.core.files import make_dir, open_new_file
from msprobe.core.processes import worker_pool
from msprobe.core.tensor_files import save_npy
from msprobe.pytorch.tensor_io import map_tensors, tensor_to_numpy, tensors_in

logger = logging.getLogger(__name__)

COLUMNS = [
    "API Name",
    "Bench Dtype",
    "Device Dtype",
    "Shape",
    "Cosine",
    "MaxAbsError",
    "Accuracy Reached or Not",
    "Message",
]
DUMP_MODES = ("all", "list", "auto", "OFF")
_RANDOM = ("dropout", "bernoulli", "rand", "normal", "uniform", "multinomial", "exponential", "empty")


@functools.cache
def blacklist() -> frozenset[str]:
    text = importlib.resources.files("msprobe.pytorch.dump").joinpath("torch_ops_config.yaml").read_text()
    return frozenset(yaml.safe_load(text).get("aten_ops_blacklist", []))


def op_name(func: Any) -> str:
    """'aten::native_layer_norm.default' -> 'native_layer_norm'."""
    return str(getattr(func, "_schema", func).name).split("::")[-1] if hasattr(func, "_schema") else str(func)


def _to_cpu(tensor: torch.Tensor, upcast: bool) -> torch.Tensor:
    data = tensor.detach()
    if upcast and data.is_floating_point():
        return data.to("cpu", torch.float64)
    return data.to("cpu").clone()


def judge(device: np.ndarray, bench: np.ndarray) -> tuple[object, object, str, str]:
    """(Cosine, MaxAbsError, Accuracy Reached or Not, Message) by the rule of seed 004."""
    if device.shape != bench.shape:
        return "N/A", "N/A", "No", "shape differs from the CPU result"
    a = device.astype(np.float64).ravel()
    b = bench.astype(np.float64).ravel()
    if a.size == 0:
        return "N/A", "N/A", "Yes", "empty"
    finite_a, finite_b = np.isfinite(a), np.isfinite(b)
    if not np.array_equal(finite_a, finite_b):
        return "N/A", "N/A", "No", "inf/nan differ from the CPU result"
    a, b = a[finite_a], b[finite_b]
    if a.size == 0:
        return 1.0, 0.0, "Yes", ""
    max_abs = float(np.abs(a - b).max())
    na, nb = np.linalg.norm(a), np.linalg.norm(b)
    cosine = 1.0 if na == nb == 0 else (float(np.dot(a, b) / (na * nb)) if na and nb else 0.0)
    failed = (cosine < 0.99 and max_abs > 0.001) or cosine < 0.9 or max_abs > 1
    return cosine, max_abs, "No" if failed else "Yes", ""


def cpu_check(
    name: str,
    func_name: str,
    args: Any,
    kwargs: Any,
    device_outputs: list[np.ndarray],
    device_dtypes: list[str],
    upcast: bool,
) -> tuple[list[list[object]], list[np.ndarray]]:
    """Run one op on the CPU and compare; also the entry point of worker processes."""
    namespace, _, rest = func_name.partition("::")
    packet, _, overload = rest.partition(".")
    func = getattr(getattr(getattr(torch.ops, namespace), packet), overload or "default")
    cpu_args = map_tensors(args, lambda t: _to_cpu(t, upcast))
    cpu_kwargs = map_tensors(kwargs, lambda t: _to_cpu(t, upcast))
    with torch.no_grad():
        bench = [tensor_to_numpy(t) for t in tensors_in(func(*cpu_args, **cpu_kwargs))]
    rows = []
    for index, (device, expected) in enumerate(zip(device_outputs, bench)):
        cosine, max_abs, reached, message = judge(device, expected)
        rows.append(
            [
                f"{name}.output.{index}",
                str(expected.dtype),
                device_dtypes[index],
                str(tuple(device.shape)),
                cosine,
                max_abs,
                reached,
                message,
            ]
        )
    return rows, bench


class PtdbgDispatch(TorchDispatchMode):
    def __init__(
        self,
        dump_mode: str = "OFF",
        api_list: list[str] | None = None,
        debug: bool = False,
        dump_path: str | None = None,
        tag: str | None = None,
        process_num: int = 0,
    ):
        super().__init__()
        if dump_mode not in DUMP_MODES:
            raise UsageError(f"PtdbgDispatch: dump_mode must be one of {', '.join(DUMP_MODES)}, got {dump_mode!r}")
        if dump_path is None:
            raise UsageError("PtdbgDispatch needs dump_path")
        if dump_mode == "list" and not api_list:
            raise UsageError("PtdbgDispatch: dump_mode 'list' needs api_list (ATen op names such as 'mm')")
        if not isinstance(process_num, int) or process_num < 0:
            raise UsageError("PtdbgDispatch: process_num must be a non-negative integer")
        self.dump_mode = dump_mode
        self.api_list = set(api_list or [])
        self.debug = debug
        self.process_num = process_num
        rank = (
            torch.distributed.get_rank()
            if torch.distributed.is_available() and torch.distributed.is_initialized()
            else 0
        )
        stamp = time.strftime("%Y%m%d%H%M%S")
        prefix = f"msprobe_{tag}_rank{rank}" if tag else f"msprobe_rank{rank}"
        self.folder = make_dir(Path(dump_path) / f"{prefix}_{stamp}")
        self.csv_path = self.folder / f"compare_result_rank{rank}_{stamp}.csv"
        self.counts: dict[str, int] = {}
        self.failed = 0
        self.checked = 0
        self._pool: ProcessPoolExecutor | None = None
        self._pending: list[tuple[Future, str, list, list]] = []
        with open_new_file(self.csv_path, newline="") as handle:
            spreadsheet.writer(handle).writerow(COLUMNS)

    # -- context ------------------------------------------------------------------------
    def __enter__(self) -> PtdbgDispatch:
        if self.process_num > 0 and self._pool is None:
            self._pool = worker_pool(self.process_num)
        return super().__enter__()

    def __exit__(self, *exc: Any) -> None:
        super().__exit__(*exc)
        self._drain()
        if self._pool is not None:
            self._pool.shutdown()
            self._pool = None
        logger.info("PtdbgDispatch: %d ops checked, %d failed; %s", self.checked, self.failed, self.csv_path)

    # -- the check ----------------------------------------------------------------------
    def __torch_dispatch__(self, func: Any, types: Any, args: tuple = (), kwargs: dict | None = None) -> Any:
        kwargs = kwargs or {}
        name = op_name(func)
        if name in blacklist() or any(word in name for word in _RANDOM):
            return func(*args, **kwargs)
        before = None
        if getattr(func, "_schema", None) is not None and func._schema.is_mutable:
            # in-place and out= ops change their inputs: keep them as they were
            before = (
                map_tensors(args, lambda t: _to_cpu(t, False)),
                map_tensors(kwargs, lambda t: _to_cpu(t, False)),
            )
        output = func(*args, **kwargs)
        try:
            self._check(func, name, args, kwargs, output, before)
        except Exception as exc:  # an op the CPU cannot run: never break the training
            if self.debug:
                logger.warning("PtdbgDispatch: %s not checked: %s", name, exc)
        return output

    def _check(self, func: Any, name: str, args: tuple, kwargs: dict, output: Any, before: Any = None) -> None:
        outputs = [t for t in tensors_in(output)]
        if not outputs:
            return
        index = self.counts.get(name, 0)
        self.counts[name] = index + 1
        label = f"{name}.{index}"
        inputs = tensors_in((args, kwargs))
        upcast = all(t.device.type == "cpu" for t in inputs + outputs)
        device_outputs = [tensor_to_numpy(t.detach().cpu()) for t in outputs]
        dtypes = [str(t.dtype) for t in outputs]
        func_name = str(func._schema.name) + ("." + func._overloadname if func._overloadname != "default" else "")
        if before is not None:
            cpu_args, cpu_kwargs = before
        else:
            cpu_args = map_tensors(args, lambda t: _to_cpu(t, False))
            cpu_kwargs = map_tensors(kwargs, lambda t: _to_cpu(t, False))
        if self._pool is not None:
            future = self._pool.submit(
                cpu_check, label, func_name, cpu_args, cpu_kwargs, device_outputs, dtypes, upcast
            )
            self._pending.append((future, label, [tensor_to_numpy(t) for t in tensors_in(cpu_args)], device_outputs))
            if len(self._pending) > 4 * self.process_num:
                self._drain(keep=2 * self.process_num)
            return
        rows, bench = cpu_check(label, func_name, cpu_args, cpu_kwargs, device_outputs, dtypes, upcast)
        self._record(label, rows, [tensor_to_numpy(t) for t in tensors_in(cpu_args)], device_outputs, bench)

    def _drain(self, keep: int = 0) -> None:
        while len(self._pending) > keep:
            future, label, inputs, device_outputs = self._pending.pop(0)
            try:
                rows, bench = future.result()
            except Exception as exc:
                if self.debug:
                    logger.warning("PtdbgDispatch: %s not checked: %s", label, exc)
                continue
            self._record(label, rows, inputs, device_outputs, bench)

    def _record(self, label: str, rows: list, inputs: list, device_outputs: list, bench: list) -> None:
        self.checked += 1
        failed = any(row[6] == "No" for row in rows)
        if failed:
            self.failed += 1
            logger.warning("PtdbgDispatch: %s Failed", label)
        with open_new_file(self.csv_path, "a", newline="") as handle:
            spreadsheet.writer(handle).writerows(rows)
        op = label.rsplit(".", 1)[0]
        if (
            self.dump_mode == "all"
            or (self.dump_mode == "auto" and failed)
            or (self.dump_mode == "list" and op in self.api_list)
        ):
            self._dump(label.replace(".", "_"), inputs, device_outputs, bench)

    def _dump(self, stem: str, inputs: list, device_outputs: list, bench: list) -> None:
        npu, cpu = make_dir(self.folder / "npu"), make_dir(self.folder / "cpu")
        for index, array in enumerate(inputs):
            save_npy(array, npu / f"{stem}_input.{index}.npy")
        for index, array in enumerate(device_outputs):
            save_npy(array, npu / f"{stem}_output.{index}.npy")
        for index, array in enumerate(bench):
            save_npy(array, cpu / f"{stem}_output.{index}.npy")
