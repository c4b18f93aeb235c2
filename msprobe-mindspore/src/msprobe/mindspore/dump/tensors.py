"""What a MindSpore tensor becomes in dump.json: statistics, CRC-32, .npy files.

On CPU MindSpore the statistics are taken with numpy on the host memory the
tensor already occupies (a small MindSpore op costs milliseconds in
PyNative there). On a device they use kernels every device registers (max,
min, mean, and the norm as the square root of a sum of squares), stacked and
read back in one transfer. Same
semantics as the PyTorch side: bool Max=any/Min=all, 0-d values four
times, integers measured as float32, float64 in float64, inf/nan add the
*_except_inf_nan pair, empty tensors have no statistics.

A dump's summarizer may reuse the statistics (and CRC) of a tensor it
measured before, as the PyTorch side does: one call's output is the next
call's input. MindSpore's version counter does not move on in-place writes,
so "unchanged" is kept by the dump instead: every write it can see (an
in-place API, a jit graph, a collective, an assign or scatter primitive, an
in-place Tensor method) empties the cache, and Parameters, which optimizers
and ``set_data`` write out of its sight, are never cached.
"""

from __future__ import annotations

import functools
import math
import weakref
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

import mindspore as ms
from mindspore import mint, ops
from msprobe.core.dump.checksum import crc32_hex as checksum_hex
from msprobe.core.dump.numbers import float32_mean, json_number
from msprobe.core.dump.overflow import is_nonfinite
from msprobe.core.dump.writer import open_new_file

_FLOATING = (ms.float16, ms.float32, ms.float64, ms.bfloat16)


def to_numpy(tensor: ms.Tensor, dtype: Any = None) -> np.ndarray:
    """Host copy; bfloat16 (which numpy lacks) widens to float32. ``dtype``: the tensor's, when known."""
    if (tensor.dtype if dtype is None else dtype) == ms.bfloat16:
        tensor = tensor.astype(ms.float32)
    return tensor.asnumpy()


@functools.cache
def _on_host() -> bool:
    """CPU MindSpore: tensors already live in host memory, where numpy measures them fastest."""
    return ms.get_context("device_target") == "CPU"


def _host_statistics(tensor: ms.Tensor, dtype: Any) -> list[float]:
    host = to_numpy(tensor, dtype)
    if host.dtype not in (np.float32, np.float64):
        host = host.astype(np.float32)
    flat = host.reshape(-1)
    total = float(flat.sum())  # numpy's mean is this sum divided in the array's precision; one pass fewer
    mean = float32_mean(total, flat.size) if flat.dtype == np.float32 else total / flat.size
    return [float(flat.max()), float(flat.min()), mean, float(np.linalg.norm(flat))]


def measure(tensor: ms.Tensor, dtype: Any = None) -> dict[str, Any]:
    """``dtype``: the tensor's, when the caller has it (reading it from MindSpore costs tens of microseconds)."""
    dtype = tensor.dtype if dtype is None else dtype
    if dtype == ms.bool_:
        return {"Max": bool(tensor.any()), "Min": bool(tensor.all()), "Mean": None, "Norm": None}
    if _on_host() and tensor.ndim > 0:
        values = _host_statistics(tensor, dtype)  # one read of the tensor; a small device op costs milliseconds here
        data = tensor
    else:
        data = tensor if dtype in (ms.float32, ms.float64) else tensor.astype(ms.float32)
        if data.ndim == 0:
            value = float(data.asnumpy())
            return {key: json_number(value) for key in ("Max", "Min", "Mean", "Norm")}
        values = mint.stack((data.max(), data.min(), data.mean(), ops.sqrt((data * data).sum()))).asnumpy().tolist()
    stats = dict(zip(("Max", "Min", "Mean", "Norm"), values))
    if not all(math.isfinite(v) for v in values):
        host = to_numpy(data, dtype if data is tensor else ms.float32)
        finite = host[np.isfinite(host)]
        stats["Max_except_inf_nan"] = float(finite.max()) if finite.size else None
        stats["Min_except_inf_nan"] = float(finite.min()) if finite.size else None
    return {key: json_number(value) if isinstance(value, float) else value for key, value in stats.items()}


def crc32_hex(tensor: ms.Tensor, dtype: Any = None) -> str:
    dtype = tensor.dtype if dtype is None else dtype
    host = tensor.asnumpy() if dtype != ms.bfloat16 else tensor.view(ms.int16).asnumpy()
    return checksum_hex(np.ascontiguousarray(host).reshape(-1).view(np.uint8))


class TensorSummarizer:
    """``caching``: reuse the values of a tensor seen before, for a dump that reports every write it sees (clear())."""

    def __init__(self, task: str, summary_mode: str, caching: bool = False):
        self.task = task
        self.with_stats = task in ("statistics", "tensor", "overflow_check")
        self.with_crc = summary_mode == "md5"
        self.save_files = task == "tensor"
        self.tensor_dir: Path | None = None
        self.caching = caching and (self.with_stats or self.with_crc)
        self._cache: dict[tuple[int, str], tuple[Any, Any]] = {}  # (id, kind) -> (weak reference, value)

    def clear(self) -> None:
        """Something may have been written: measure afresh."""
        self._cache.clear()

    def _cached(self, kind: str, tensor: ms.Tensor, dtype: Any, compute: Callable[[ms.Tensor, Any], Any]) -> Any:
        if not self.caching or isinstance(tensor, ms.Parameter):
            return compute(tensor, dtype)
        key = (id(tensor), kind)
        cached = self._cache.get(key)
        if cached is not None and cached[0]() is tensor:
            return cached[1]
        value = compute(tensor, dtype)
        try:
            self._cache[key] = (weakref.ref(tensor), value)
        except TypeError:  # a tensor type without weak references: measured every time
            pass
        return value

    def set_tensor_dir(self, folder: Path | None) -> None:
        self.tensor_dir = folder

    def set_saving(self, on: bool) -> None:
        self.save_files = on

    def nonfinite(self, tensor: ms.Tensor) -> bool:
        """Overflow screening: does the tensor hold inf or nan? Full statistics only for the calls kept.

        On the host one sum answers for a finite tensor (inf and nan propagate
        through it); a sum that is not finite gets an element-wise look, so
        finite values that merely add up past the dtype's range are not reported.
        """
        if not self.with_stats or tensor.size == 0:
            return False
        dtype = tensor.dtype
        if dtype not in _FLOATING:
            return False  # integers and bools cannot hold inf or nan
        if not (_on_host() and tensor.ndim > 0):
            return any(is_nonfinite(value) for value in measure(tensor, dtype).values())
        host = to_numpy(tensor, dtype)
        if math.isfinite(float(host.sum())):
            return False
        return not bool(np.isfinite(host).all())

    def __call__(self, tensor: ms.Tensor, data_stem: str) -> dict[str, Any]:
        dtype = tensor.dtype  # read once: each read is a call into MindSpore
        summary: dict[str, Any] = {"type": "mindspore.Tensor", "dtype": str(dtype), "shape": list(tensor.shape)}
        if self.with_stats and tensor.size > 0:
            summary.update(self._cached("stats", tensor, dtype, measure))
            if self.with_crc:
                summary["md5"] = self._cached("crc", tensor, dtype, crc32_hex)
        if self.save_files and self.tensor_dir is not None:
            file_name = f"{data_stem}.npy"
            with open_new_file(self.tensor_dir / file_name, "wb") as handle:
                np.save(handle, to_numpy(tensor, dtype), allow_pickle=False)
            summary["data_name"] = file_name
        return summary


def is_tensor(value: Any) -> bool:
    return isinstance(value, ms.Tensor)


def describe_object(value: Any) -> dict[str, Any] | None:
    if isinstance(value, ms.dtype.Type):
        return {"type": "mindspore.dtype", "value": str(value)}
    return None
