"""The op log: every ATen op a block of code runs, as dump entries (``Aten.{op}.{n}.forward``).

Below the Python APIs, at the dispatcher, a run is the ops it executes.
Code that reaches the same ops another way (torch.compile's aot_eager,
a decomposition, another implementation of a layer) logs ops the dump of
Python APIs would not tell apart. Each tensor an op takes or returns gets
its statistics, a CRC-32 as ``md5``, and a float64 ``norm_hash``: the sum
of absolute values in float64, which tells two tensors apart where float32
statistics round them alike and, unlike a checksum, moves little when the
values move little. The step folders are ordinary dump folders (level
``aten``): compare and the diagnosis read them, and compare lines up two op
logs whose streams differ (see ``msprobe.core.compare.oplog``).
"""

from __future__ import annotations

import json
import logging
from pathlib import Path
from typing import Any

import torch
from torch.utils._python_dispatch import TorchDispatchMode

from msprobe.core.dump.values import ValueEncoder
from msprobe.core.files import make_dir, write_new_text
from msprobe.pytorch.dump import measuring
from msprobe.pytorch.dump.tensors import describe_object

logger = logging.getLogger(__name__)

# ops whose outputs hold whatever memory had (their statistics would differ between identical runs), and ops
# that only alias their input
_SKIPPED = frozenset(
    {"empty", "empty_like", "empty_strided", "new_empty", "new_empty_strided", "detach", "alias", "lift_fresh"}
)


def norm_hash(tensor: torch.Tensor) -> float | None:
    """The sum of absolute values in float64 (None for a tensor that holds no numbers)."""
    data = tensor.detach()
    if data.is_meta or data.is_complex() or not (data.is_floating_point() or data.dtype == torch.bool or data.numel()):
        return None
    return float(data.to(torch.float64).abs().sum())


def _summary(tensor: torch.Tensor, _suffix: str) -> dict[str, Any]:
    data = tensor.detach()
    summary: dict[str, Any] = {"type": "torch.Tensor", "dtype": str(data.dtype), "shape": list(data.shape)}
    if data.numel() and not data.is_meta:
        summary.update(measuring.measure(data))
        summary["md5"] = measuring.crc32_hex(data)
        summary["norm_hash"] = norm_hash(data)
    summary["requires_grad"] = tensor.requires_grad
    return summary


class _Recording(TorchDispatchMode):
    def __init__(self, log: OpLog):
        super().__init__()
        self.log = log

    def __torch_dispatch__(self, func: Any, types: Any, args: tuple = (), kwargs: dict | None = None) -> Any:
        kwargs = kwargs or {}
        op = func.overloadpacket.__name__ if hasattr(func, "overloadpacket") else str(func)
        if op in _SKIPPED:
            return func(*args, **kwargs)
        inputs = self.log.encode_inputs(op, args, kwargs)  # before the call: an in-place op writes into them
        output = func(*args, **kwargs)
        self.log.record(op, inputs, output)
        return output


class OpLog:
    """``with OpLog(dump_path) as log:`` logs the ATen ops of the block; ``log.step()`` ends a step (each step's
    ops go to ``dump_path/step{N}/rank/dump.json``), and leaving the block writes the last one."""

    def __init__(self, dump_path: str | Path):
        self.dump_path = Path(dump_path)
        make_dir(self.dump_path)
        self.current_step = 0
        self._data: dict[str, Any] = {}
        self._counts: dict[str, int] = {}
        self._encoder = ValueEncoder(torch.Tensor, _summary, describe_object)
        self._mode: _Recording | None = None
        self._failed: set[str] = set()

    def encode_inputs(self, op: str, args: tuple, kwargs: dict) -> tuple[list, dict] | None:
        try:
            return self._encoder.encode_args(args, kwargs, op)
        except Exception as exc:  # the op runs all the same; the log goes without it
            self._failed_once(op, exc)
            return None

    def record(self, op: str, inputs: tuple[list, dict] | None, output: Any) -> None:
        if inputs is None:
            return
        try:
            index = self._counts.get(op, 0)
            self._counts[op] = index + 1
            name = f"Aten.{op}.{index}.forward"
            args, kwargs = inputs
            self._data[name] = {
                "input_args": args,
                "input_kwargs": kwargs,
                "output": self._encoder.encode_outputs(output, f"{name}.output"),
            }
        except Exception as exc:
            self._failed_once(op, exc)

    def _failed_once(self, op: str, exc: Exception) -> None:
        if op not in self._failed:
            self._failed.add(op)
            logger.warning(
                "msprobe: the op log could not record aten.%s (%s: %s); the op ran", op, type(exc).__name__, exc
            )

    def step(self) -> None:
        """Write this step's ops and begin the next step."""
        if self._data:
            folder = self.dump_path / f"step{self.current_step}" / "rank"
            make_dir(folder)
            header = {"task": "statistics", "level": "aten", "framework": "pytorch", "dump_data_dir": None}
            write_new_text(folder / "dump.json", json.dumps({**header, "data": self._data}, indent=1))
            write_new_text(folder / "stack.json", "{}")
            write_new_text(folder / "construct.json", "{}")
        self._data, self._counts = {}, {}
        self.current_step += 1

    def __enter__(self) -> OpLog:
        self._mode = _Recording(self)
        self._mode.__enter__()
        return self

    def __exit__(self, *exc: Any) -> None:
        mode, self._mode = self._mode, None
        if mode is not None:
            mode.__exit__(*exc)
        if self._data:
            self.step()
