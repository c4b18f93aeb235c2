"""What a MindSpore tensor becomes in dump.json: statistics, CRC-32, .npy files.

On CPU MindSpore the statistics are taken with numpy on the host memory the
tensor already occupies (a small MindSpore op costs milliseconds in
PyNative there). On a device they use kernels every device registers (max,
min, mean, and the norm as the square root of a sum of squares), stacked and
read back in one transfer. Same
semantics as the PyTorch side: bool Max=any/Min=all, 0-d values four
times, integers measured as float32, float64 in float64, inf/nan add the
*_except_inf_nan pair, empty tensors record the four keys as null.

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
from msprobe.core.dump import float_stats
from msprobe.core.dump.checksum import crc32_hex as checksum_hex
from msprobe.core.dump.file_pool import FilePool
from msprobe.core.dump.npy_file import write_npy
from msprobe.core.dump.numbers import float32_mean, json_number, no_statistics
from msprobe.core.dump.overflow import is_nonfinite
from msprobe.core.dump.summarizer import summary_plan
from msprobe.core.recording.tensor_cuts import KvCacheTensors, TensorCut

_FLOATING = (ms.float16, ms.float32, ms.float64, ms.bfloat16)


def to_numpy(tensor: ms.Tensor, dtype: Any = None) -> np.ndarray:
    """The tensor's values for numpy; bfloat16 (which numpy lacks) widens to float32.

    On CPU MindSpore the array is the tensor's own memory, read-only, as
    ``asnumpy`` shares it too. ``dtype``: the tensor's, when known.
    """
    dtype = tensor.dtype if dtype is None else dtype
    if dtype == ms.bfloat16:
        tensor = tensor.astype(ms.float32)
    elif _on_host() and not tensor.has_init:  # a tensor made with init= has no memory until asked
        view = _host_view(tensor, dtype)
        if view is not None:
            return view
    return tensor.asnumpy()


_NUMPY_TYPES = {
    ms.float16: "<f2",
    ms.float32: "<f4",
    ms.float64: "<f8",
    ms.int8: "|i1",
    ms.int16: "<i2",
    ms.int32: "<i4",
    ms.int64: "<i8",
    ms.uint8: "|u1",
    ms.uint16: "<u2",
    ms.uint32: "<u4",
    ms.uint64: "<u8",
    ms.bool_: "|b1",
    ms.complex64: "<c8",
    ms.complex128: "<c16",
}
_ITEMSIZES = {typestr: np.dtype(typestr).itemsize for typestr in _NUMPY_TYPES.values()}


class _HostMemory:
    """A tensor's elements where they lie in host memory, for numpy; holds the tensor while the array lives."""

    __slots__ = ("__array_interface__", "tensor")

    def __init__(self, tensor: ms.Tensor, typestr: str, strides: list[int]):
        self.tensor = tensor
        itemsize = _ITEMSIZES[typestr]
        self.__array_interface__ = {
            "version": 3,
            "data": (tensor.data_ptr(), True),  # read-only; data_ptr waits for the op that writes the tensor
            "shape": tuple(tensor.shape),
            "typestr": typestr,
            "strides": tuple(stride * itemsize for stride in strides),
        }


def _host_view(tensor: ms.Tensor, dtype: Any) -> np.ndarray | None:
    """A CPU tensor's elements read where they lie, through its strides, or None where numpy cannot.

    ``asnumpy`` makes a non-contiguous tensor (a transpose, a narrow)
    contiguous first with a MindSpore op, costly in PyNative; and for any
    tensor it goes through the buffer protocol, whose format numpy parses in
    Python on every read.
    """
    typestr = _NUMPY_TYPES.get(dtype)
    strides = tensor.stride()
    if typestr is None or any(stride < 0 for stride in strides) or tensor.size == 0:
        return None
    return np.asarray(_HostMemory(tensor, typestr, strides))


@functools.cache
def _on_host() -> bool:
    """CPU MindSpore: tensors already live in host memory, where numpy measures them fastest."""
    return ms.get_context("device_target") == "CPU"


def _host_statistics(tensor: ms.Tensor, dtype: Any, host: np.ndarray | None = None) -> list[float]:
    if host is None:
        host = to_numpy(tensor, dtype)
    if host.dtype not in (np.float32, np.float64):
        host = host.astype(np.float32)
    flat = host.reshape(-1)
    if flat.flags.c_contiguous:
        values = float_stats.stats_of(flat)  # one pass in C, as the PyTorch side measures; None with an inf or nan
        if values is not None:
            return list(values)
    total = float(flat.sum())  # numpy's mean is this sum divided in the array's precision; one pass fewer
    mean = float32_mean(total, flat.size) if flat.dtype == np.float32 else total / flat.size
    return [float(flat.max()), float(flat.min()), mean, float(np.linalg.norm(flat))]


def measure(tensor: ms.Tensor, dtype: Any = None, host: np.ndarray | None = None) -> dict[str, Any]:
    """``dtype``: the tensor's, when the caller has it (reading it from MindSpore costs tens of microseconds).

    ``host``: the tensor's values as ``to_numpy`` gives them, when the caller has read them already.
    """
    dtype = tensor.dtype if dtype is None else dtype
    if dtype == ms.bool_:
        return {"Max": bool(tensor.any()), "Min": bool(tensor.all()), "Mean": None, "Norm": None}
    if _on_host() and tensor.ndim > 0:
        # one read of the tensor; a small device op costs milliseconds here
        values = _host_statistics(tensor, dtype, host)
        data = tensor
    else:
        data = tensor if dtype in (ms.float32, ms.float64) else tensor.astype(ms.float32)
        if data.ndim == 0:
            value = float(data.asnumpy())
            return {key: json_number(value) for key in ("Max", "Min", "Mean", "Norm")}
        values = mint.stack((data.max(), data.min(), data.mean(), ops.sqrt((data * data).sum()))).asnumpy().tolist()
    stats = dict(zip(("Max", "Min", "Mean", "Norm"), values))
    if not all(math.isfinite(v) for v in values):
        if host is None or data is not tensor:
            host = to_numpy(data, dtype if data is tensor else ms.float32)
        finite = host[np.isfinite(host)]
        stats["Max_except_inf_nan"] = float(finite.max()) if finite.size else None
        stats["Min_except_inf_nan"] = float(finite.min()) if finite.size else None
    return {key: json_number(value) if isinstance(value, float) else value for key, value in stats.items()}


def crc32_hex(tensor: ms.Tensor, dtype: Any = None) -> str:
    dtype = tensor.dtype if dtype is None else dtype
    host = to_numpy(tensor, dtype) if dtype != ms.bfloat16 else tensor.view(ms.int16).asnumpy()
    return checksum_hex(np.ascontiguousarray(host).reshape(-1).view(np.uint8))


_PLACEHOLDERS = {"Max": None, "Min": None, "Mean": None, "Norm": None}
_SETTLE_COUNT = 512  # tensors waiting at most: bounds the memory they hold and what a killed process loses
_SETTLE_BYTES = 256 << 20


class _Lazy:
    """One tensor's values, taken at the next settle, and the summaries waiting to show them."""

    __slots__ = ("dtype", "summaries", "tensor", "values")

    def __init__(self, tensor: ms.Tensor, dtype: Any):
        self.tensor: ms.Tensor | None = tensor
        self.dtype = dtype
        self.summaries: list[dict[str, Any]] = []
        self.values: dict[str, Any] | None = None


def _fill(summary: dict[str, Any], values: dict[str, Any]) -> None:
    """Put the values in place of the placeholders, extra keys (``*_except_inf_nan``) right after Norm."""
    if values.keys() <= summary.keys():
        summary.update(values)
        return
    items = list(summary.items())
    summary.clear()
    for key, value in items:
        summary[key] = values.get(key, value)
        if key == "Norm":
            summary.update((extra, v) for extra, v in values.items() if extra not in _PLACEHOLDERS and extra != "md5")


def _drop(summary: dict[str, Any], keys: dict[str, Any]) -> None:
    """No values could be taken: the summary shows none rather than nulls that look measured."""
    for key in keys:
        summary.pop(key, None)


class TensorSummarizer:
    """Keeps msprobe.core.dump.summarizer's contract. ``caches``: reuse the values of a tensor seen before,
    for a dump that reports every write it sees (clear()).

    ``lazy`` (CPU MindSpore, statistics, tensor, overflow_check): a tensor is read
    at the next ``settle()``, not when its call returns. Each read of a
    tensor waits for PyNative's queue of launched ops to drain, so reading
    at every call stops the queue from running ahead of Python; reading a
    batch costs one wait. The dump settles before every write it sees (the
    values read are then those of the call), when it stops, at the end of a
    step, and when too many tensors wait; Parameters, which optimizers write
    out of its sight, are read at once. The overflow check defers its whole
    decision per call instead (``defer``). ``on_settled`` runs after each settle,
    which raises the last error met reading (the tensors it could read are
    filled in all the same).
    """

    def __init__(
        self,
        task: str,
        summary_mode: str,
        caches: bool = False,
        lazy: bool = False,
        cut: TensorCut | None = None,
        kv_cache: KvCacheTensors | None = None,
    ):
        self.task = task
        self.cut = cut  # request_id and slice: the part of each tensor the entry describes
        self.kv_cache = kv_cache  # task tensor: KV cache tensors are summarised, not saved
        self.plan = summary_plan(task, summary_mode)  # no xor: the backend refuses it at validation
        self.with_stats = self.plan.statistics
        self.with_crc = self.plan.checksum == "crc32"
        self.save_files = self.plan.files
        self.tensor_dir: Path | None = None
        self.caches = caches and self.plan.caches
        self._cache: dict[tuple[int, str], tuple[Any, Any]] = {}  # (id, kind) -> (weak reference, value)
        self.lazy = lazy and task in ("statistics", "tensor", "overflow_check") and _on_host()
        self.lazy_values = self.lazy and task in ("statistics", "tensor")  # the overflow check defers whole records
        self._waiting_records: list[Callable[[], None]] = []
        self._placeholders = {**_PLACEHOLDERS, "md5": None} if self.with_crc else _PLACEHOLDERS
        self._waiting: list[_Lazy] = []
        self._waiting_files: list[tuple[ms.Tensor, Any, Path]] = []
        self._files = FilePool()
        self._waiting_bytes = 0
        self.on_settled: Callable[[], None] | None = None
        self.when_full: Callable[[], None] = self.settle  # the dump's settle, which reports errors

    def clear(self) -> None:
        """Something may have been written: measure afresh."""
        self._cache.clear()

    def settle(self) -> None:
        """Read every waiting tensor now and fill the summaries waiting for it."""
        if not self._waiting and not self._waiting_files and not self._waiting_records:
            return
        waiting, self._waiting = self._waiting, []
        files, self._waiting_files = self._waiting_files, []
        records, self._waiting_records = self._waiting_records, []
        self._waiting_bytes = 0
        failure: Exception | None = None
        hosts: dict[int, np.ndarray] = {}  # one host array per tensor, for its files and its statistics
        for tensor, dtype, path in files:  # written on the pool's threads while the statistics are taken here
            try:
                host = hosts.get(id(tensor))
                if host is None:
                    host = hosts[id(tensor)] = to_numpy(tensor, dtype)
                self._files.submit(functools.partial(write_npy, path, host))
            except Exception as exc:
                failure = exc
        for lazy in waiting:
            try:
                values = measure(lazy.tensor, lazy.dtype, hosts.get(id(lazy.tensor)))
                if self.with_crc:
                    values["md5"] = crc32_hex(lazy.tensor, lazy.dtype)
            except Exception as exc:  # its summaries show no values; the others are still read
                values, failure = {}, exc
            lazy.values, lazy.tensor = values, None
            for summary in lazy.summaries:
                _fill(summary, values) if values else _drop(summary, self._placeholders)
            lazy.summaries = []
        for record in records:
            try:
                record()
            except Exception as exc:
                failure = exc
        try:
            self._files.wait()  # the host arrays share the tensors' memory: ``files`` keeps them alive until here
        except Exception as exc:
            failure = exc
        if self.on_settled is not None:
            self.on_settled()
        if failure is not None:
            raise failure  # the caller reports it (once; with ``strict``, raised)

    def _wait_for(self, tensor: ms.Tensor, dtype: Any, summary: dict[str, Any]) -> None:
        lazy = self._cached("lazy", tensor, dtype, self._new_lazy)  # one read for a tensor seen again unchanged
        if lazy.values is not None:
            summary.update(lazy.values)
        else:
            summary.update(self._placeholders)
            lazy.summaries.append(summary)

    def _new_lazy(self, tensor: ms.Tensor, dtype: Any) -> _Lazy:
        lazy = _Lazy(tensor, dtype)
        self._waiting.append(lazy)
        self._waiting_bytes += tensor.nbytes
        return lazy

    def defer(self, record: Callable[[], None], holding: Any = ()) -> None:
        """Run ``record`` at the next settle (the overflow check's decision, which reads the call's tensors).

        ``holding``: the tensors the record keeps alive until then (a tensor, or a list or tuple of them).
        """
        self._waiting_records.append(record)
        for value in holding if isinstance(holding, (list, tuple)) else (holding,):
            if isinstance(value, ms.Tensor):
                self._waiting_bytes += value.nbytes
        self._settle_if_full()

    def _settle_if_full(self) -> None:
        waiting = len(self._waiting) + len(self._waiting_files) + len(self._waiting_records)
        if waiting >= _SETTLE_COUNT or self._waiting_bytes >= _SETTLE_BYTES:
            self.when_full()

    def _cached(self, kind: str, tensor: ms.Tensor, dtype: Any, compute: Callable[[ms.Tensor, Any], Any]) -> Any:
        if not self.caches or isinstance(tensor, ms.Parameter):
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

        On the host the kernels look at the exponent bits; without them one sum
        answers for a finite tensor (inf and nan propagate through it), and a
        sum that is not finite gets an element-wise look, so finite values
        that merely add up past the dtype's range are not reported.
        """
        if not self.with_stats or tensor.size == 0:
            return False
        dtype = tensor.dtype
        if dtype not in _FLOATING:
            return False  # integers and bools cannot hold inf or nan
        if not (_on_host() and tensor.ndim > 0):
            return any(is_nonfinite(value) for value in measure(tensor, dtype).values())
        host = np.ascontiguousarray(to_numpy(tensor, dtype))  # a view is copied here, not by MindSpore
        found = float_stats.any_nonfinite_of(host)  # the exponent bits, looked at in C
        if found is not None:
            return found
        if math.isfinite(float(host.sum())):
            return False
        return not bool(np.isfinite(host).all())

    def __call__(self, tensor: ms.Tensor, data_stem: str) -> dict[str, Any]:
        saving = self.save_files and (self.kv_cache is None or not self.kv_cache.holds(tensor, data_stem))
        if self.cut is not None:
            index = self.cut.index(tuple(tensor.shape), isinstance(tensor, ms.Parameter))
            if index is not None:
                tensor = tensor[index]
        dtype = tensor.dtype  # read once: each read is a call into MindSpore
        summary: dict[str, Any] = {"type": "mindspore.Tensor", "dtype": str(dtype), "shape": list(tensor.shape)}
        lazy = self.lazy_values and dtype != ms.bool_ and not isinstance(tensor, ms.Parameter)
        if self.with_stats and tensor.size > 0:
            if lazy:
                self._wait_for(tensor, dtype, summary)
            else:
                summary.update(self._cached("stats", tensor, dtype, measure))
                if self.with_crc:
                    summary["md5"] = self._cached("crc", tensor, dtype, crc32_hex)
        elif self.with_stats:
            summary.update(no_statistics())
            if self.with_crc:
                summary["md5"] = crc32_hex(tensor, dtype)
        if saving and self.tensor_dir is not None:
            file_name = f"{data_stem}.npy"
            if lazy:
                self._waiting_files.append((tensor, dtype, self.tensor_dir / file_name))
                self._waiting_bytes += tensor.nbytes
            else:
                self._save(tensor, dtype, self.tensor_dir / file_name)
            summary["data_name"] = file_name
        if lazy:
            self._settle_if_full()
        return summary

    def close(self) -> None:
        """The dump stopped: let the file threads go."""
        self._files.close()

    @staticmethod
    def _save(tensor: ms.Tensor, dtype: Any, path: Path) -> None:
        write_npy(path, to_numpy(tensor, dtype))


def describe_object(value: Any) -> dict[str, Any] | None:
    if isinstance(value, ms.dtype.Type):
        return {"type": "mindspore.dtype", "value": str(value)}
    return None
