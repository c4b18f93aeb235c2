"""What a torch tensor becomes in dump.json: statistics, CRC-32, tensor files (the summarizer).

How one tensor is measured is in ``measuring``, the device batch in
``device_batch``, nested, sparse and quantized tensors in ``unusual``. A
tensor seen again unchanged (one API's output is the next one's input)
reuses its statistics. "Unchanged" means the same object, version and
memory, and no in-place call the dump sees (recorded or only watched, see
the recorder) has written that memory since: writes through an alias
(``w.data.mul_(2)``), a collective (``all_reduce``), GradScaler's
unscaling and the fused optimizers leave torch's version counter as it was.
"""

from __future__ import annotations

import functools
import json
import logging
import math
import weakref
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch

from msprobe.core.dump import float_stats
from msprobe.core.dump.file_pool import FilePool
from msprobe.core.dump.numbers import json_number, no_statistics
from msprobe.core.dump.overflow import is_nonfinite
from msprobe.core.dump.summarizer import summary_plan
from msprobe.core.dump.writer import RawJSON
from msprobe.core.recording.tensor_cuts import KvCacheTensors, TensorCut
from msprobe.pytorch.dump import device_batch, fast_path, measuring, parallel, special_tensors
from msprobe.pytorch.dump.pt_file import PtWriter

logger = logging.getLogger(__name__)
_DTYPE_NAMES = {value: str(value) for value in vars(torch).values() if isinstance(value, torch.dtype)}


def _measure_range(tensor: torch.Tensor, batch: device_batch.DeviceBatch | None = None) -> dict[str, Any]:
    """Overflow screening. A finite sum proves every element finite (inf and nan propagate through it),
    and one sum is cheaper than a min/max pass; only a non-finite sum (or one that overflowed) is looked into.
    Each read from a device is counted in ``batch.reads``: the screen cannot wait for a batch (see
    docs/overflow_check.md).
    """
    data = tensor.detach()
    if data.dtype not in device_batch.SCREENED_BY_SUM or not data.dim():  # the usual floating tensor skips these checks
        if data.dtype == torch.bool or not data.dim() or data.is_complex():
            _count_read(batch, data)
            return measuring.measure(tensor)
        if not data.is_floating_point():
            return {}  # integers cannot hold inf or nan
    if _proved_finite(data, batch):
        return {}
    low, high = torch.aminmax(data)
    _count_read(batch, data)
    if data.is_cpu:
        maximum, minimum = float(high.item()), float(low.item())
    else:
        maximum, minimum = torch.stack((high, low)).float().tolist()
    return {"Max": json_number(maximum), "Min": json_number(minimum)}


def _count_read(batch: device_batch.DeviceBatch | None, data: torch.Tensor) -> None:
    if batch is not None and (device_batch.FORCE_DEVICE_PATH or not data.is_cpu):
        batch.reads += 1


def _kernel_screen(data: torch.Tensor) -> bool | None:
    """Whether a CPU tensor holds an inf or nan, from its exponent bits read in C; None where they cannot be read
    (and with the device path forced, which screens as on a device)."""
    kind = measuring.SCREEN_KINDS.get(data.dtype)
    if kind is None or not float_stats.AVAILABLE or not data.is_cpu or device_batch.FORCE_DEVICE_PATH:
        return None
    address = measuring.plain_memory(data)
    return None if address is None else float_stats.any_nonfinite_at(address, data.numel(), kind)


def _proved_finite(data: torch.Tensor, batch: device_batch.DeviceBatch | None = None) -> bool:
    """Every element is finite: the exponent bits on the CPU, else a finite sum (one read on any device;
    inf and nan propagate through a sum, but a sum of finite values may also overflow).
    """
    found = _kernel_screen(data)
    if found is not None:
        return not found
    _count_read(batch, data)
    return math.isfinite(measuring.torch_sum(data).item())


def _storage_address(tensor: torch.Tensor) -> int | None:
    if type(tensor) is not torch.Tensor and parallel.is_dtensor(tensor):
        # a DTensor written in place writes its shard, whose own version counter does not move: the write is
        # known by the shard's memory
        tensor = tensor._local_tensor
    try:
        return tensor.untyped_storage().data_ptr()
    except Exception:  # sparse, nested and wrapper tensors have no single storage
        return None


def _needs_copy(tensor: torch.Tensor) -> bool:
    if tensor.layout != torch.strided or tensor.is_quantized:
        return False  # saved as it is by torch.save
    storage_bytes = tensor.untyped_storage().nbytes()
    return not tensor.is_contiguous() or storage_bytes != tensor.numel() * tensor.element_size()


class WriteLog:
    """Which memory the dump saw written, and when: a value cached before a write to its memory is stale.

    ``count`` grows with every write seen; ``written_at`` maps a storage's
    address to the count at its last write. The C fast path reads and updates
    both fields directly (``_fast_path.c``), so their names are its interface.
    """

    __slots__ = ("count", "written_at")

    def __init__(self) -> None:
        self.count = 0
        self.written_at: dict[int, int] = {}

    def note(self, tensors: list[Any]) -> None:
        for tensor in tensors:
            storage = _storage_address(tensor)
            if storage is not None:
                self.count += 1
                self.written_at[storage] = self.count

    def written_since(self, storage: int, count: int) -> bool:
        return self.written_at.get(storage, 0) > count

    def clear(self) -> None:
        self.written_at.clear()


def _own_requires_grad(text: str, wanted: bool, held: bool) -> str:
    """A cached summary text of the tensor held inside a wrapper (a DTensor's shard, a collective's result),
    saying the wrapper's requires_grad."""
    if wanted == held:
        return text
    return text.replace(f'"requires_grad":{str(held).lower()}', f'"requires_grad":{str(wanted).lower()}')


class TensorSummarizer:
    """Summarizes tensors for one run; caches statistics of unchanged tensors within a step. Keeps
    msprobe.core.dump.summarizer's contract."""

    def __init__(
        self,
        task: str,
        summary_mode: str,
        deferred: bool = False,
        live_diff: bool = False,
        cut: TensorCut | None = None,
        kv_cache: KvCacheTensors | None = None,
    ):
        self.task = task
        self.cut = cut  # request_id and slice: the part of each tensor the entry describes
        self.kv_cache = kv_cache  # task tensor: KV cache tensors are summarised, not saved
        self._saving_this = True
        self.deferred = deferred
        self._pending_files: list[tuple[torch.Tensor, Path]] = []
        self._pool: FilePool | None = None  # async mode's file threads
        self._closed = False
        self._files = PtWriter()
        self.plan = summary_plan(task, summary_mode)
        self.with_xor = self.plan.checksum == "xor"  # 26.x: an XOR checksum as md5, and no statistics
        self.with_stats = self.plan.statistics
        self.with_crc = self.plan.checksum == "crc32"
        self.save_files = self.plan.files
        self.online: dict[str, Any] | None = None  # data_name -> array, when streaming to a receiver
        self.tensor_dir: Path | None = None
        # (id, kind) -> (weak reference, version, data address, storage address, write count when measured, value)
        self._cache: dict[tuple[int, str], tuple[Any, int, int, int, int, Any]] = {}
        self.write_log = WriteLog()
        self.caches = self.plan.caches
        # a run of several processes: float64 sums beside the statistics, and parameters marked, so that its
        # ranks merge into one global run (see msprobe.pytorch.dump.parallel)
        self.shard_sums = parallel.world() is not None and self.with_stats
        self._shard_texts: dict[tuple, str] = {}  # a DTensor's text by its parts (_shard_text)
        # the usual entry, statistics of a plain CPU float tensor, measured and cached as JSON text in C (_fast_path.c):
        # the bulk of a dump; everything else, and any doubt, goes the general way below, which writes the same
        # md5 too, its CRC-32 cached with the statistics; not for the live diff, which reads each call's values
        quick = task == "statistics" and not self.with_xor and not deferred and not (self.with_crc and live_diff)
        checksum = measuring.crc32_hex if self.with_crc else None
        self.quick_texts = (
            fast_path.summaries(self.write_log, checksum, self.shard_sums)
            if quick and not device_batch.FORCE_DEVICE_PATH
            else None
        )
        # device tensors' statistics, read back in batches (not with async_dump, which reads at step end)
        batched = (self.with_stats or self.with_xor) and not deferred
        self.batch = device_batch.DeviceBatch() if batched and device_batch.device_path_active() else None
        # only the overflow check's screens wait in the batch; elsewhere the encoder does not ask, call by call
        waits = self.batch is not None and task == "overflow_check"
        self.nonfinite_later = self._nonfinite_later if waits else None
        # the per-call path in C writes a device tensor's statistics summary with a token for the values still in
        # the batch, its text cached in C as the quick texts are (see fast_path.waiting_summaries); md5, files and
        # cuts take the general way
        plain = task == "statistics" and not (self.with_crc or self.with_xor or live_diff or self.shard_sums)
        plain = plain and cut is None
        self.waiting_texts = (
            fast_path.waiting_summaries(self.write_log, self._measure_waiting, device_batch.summary_rest)
            if self.batch is not None and plain
            else None
        )

    def set_tensor_dir(self, folder: Path | None) -> None:
        self.tensor_dir = folder

    def set_saving(self, on: bool) -> None:
        """Overflow check writes tensor files only for the calls it keeps."""
        self.save_files = on

    def clear(self) -> None:
        self._cache.clear()
        if self.quick_texts is not None:
            self.quick_texts.clear()
        if self.waiting_texts is not None:
            self.waiting_texts.clear()
        self.write_log.clear()

    def overwriting(self, tensors: list[Any]) -> None:
        """A call is about to write into these tensors' memory: statistics cached for it, under any alias, go stale."""
        self.write_log.note(tensors)

    def write_pending(self) -> None:
        """Async mode: the tensor files of the step, written when it ends, several at once (see FilePool)."""
        pending, self._pending_files = self._pending_files, []
        if not pending:
            return
        if self._pool is None:
            self._pool = FilePool()  # kept for the run: its threads serve every step
        pool = self._pool
        try:
            for data, path in pending:
                pool.submit(functools.partial(self._files.save, data.cpu(), path))
            pool.wait()  # every file is tried; the last failure is raised
        finally:
            if self._closed:  # the last step's files, written after the run ended (finish())
                self.close()

    def close(self) -> None:
        """The run ends: let the file threads go (files still pending are written by ``write_pending``)."""
        self._closed = True
        pool, self._pool = self._pool, None
        if pool is not None:
            pool.close()

    def statistics(self, tensor: torch.Tensor) -> dict[str, Any]:
        return special_tensors.by_kind(tensor, self._statistics, special_tensors.unusual_statistics)

    def _statistics(self, tensor: torch.Tensor) -> dict[str, Any]:
        if self.task == "overflow_check" and not self.save_files:
            return self._cached("range", tensor, self._screen)  # full statistics only for the calls kept
        if self.deferred:
            return self._cached("stats", tensor, measuring.measure_deferred)
        if self._batched(tensor):
            stats = self._cached("stats", tensor, self.batch.measure_stats)
            return stats.pending() if isinstance(stats, device_batch.BatchedStats) else stats
        return self._cached("stats", tensor, measuring.measure)

    def _screen(self, tensor: torch.Tensor) -> dict[str, Any]:
        return _measure_range(tensor, self.batch)

    def _batched(self, tensor: torch.Tensor) -> bool:
        return (
            self.batch is not None
            and (device_batch.FORCE_DEVICE_PATH or not tensor.is_cpu)
            and device_batch.plain_device_tensor(tensor)
        )

    def _cached(self, kind: str, tensor: torch.Tensor, compute: Callable[[torch.Tensor], Any]) -> Any:
        """``compute(tensor)``, reused while the tensor is unchanged (see the module's docstring)."""
        try:
            current = tensor._version
        except RuntimeError:  # inference_mode tensors keep no version counter: an unseen write could not be told
            return compute(tensor)
        key = (id(tensor), kind)
        cached = self._cache.get(key)
        if cached is not None and self._unchanged(tensor, current, cached):
            return cached[5]
        value = compute(tensor)
        storage = _storage_address(tensor)
        if storage is not None:  # no plain memory (sparse, wrappers): measured every time
            try:
                self._cache[key] = (
                    weakref.ref(tensor),
                    current,
                    tensor.data_ptr(),
                    storage,
                    self.write_log.count,
                    value,
                )
            except TypeError:  # some tensor subclasses refuse weak references
                pass
        return value

    def _unchanged(self, tensor: torch.Tensor, version: int, cached: tuple) -> bool:
        """The cache's rule (see the module's docstring; _fast_path.c keeps the same for the quick texts) for an entry
        that begins (weak reference, version, data address, storage address, write count when measured): the
        same object, version and memory, and no write the dump saw to that memory since."""
        return (
            cached[0]() is tensor
            and cached[1] == version
            and tensor.data_ptr() == cached[2]  # another address: `.data` or `set_` gave it other memory
            and not self.write_log.written_since(cached[3], cached[4])
        )

    def quick_nonfinite(self, tensor: torch.Tensor) -> bool:
        """Whether a tensor holds inf or nan, from its exponent bits read in C where it can (a CPU float
        tensor), else as ``nonfinite`` measures it."""
        found = _kernel_screen(tensor.detach()) if type(tensor) in measuring.PLAIN_TYPES else None
        return self.nonfinite(tensor) if found is None else found

    def _nonfinite_later(self, tensor: torch.Tensor) -> bool | device_batch.BatchedSum | None:
        """The overflow check's screen of a device tensor without a read: its sum waits in the batch (see
        ``ValueEncoder.screen_later``). False: it cannot hold inf or nan; None: it is screened now instead."""
        if not self.with_stats:
            return False
        if self.save_files:
            return None
        if not (device_batch.FORCE_DEVICE_PATH or not tensor.is_cpu) or not device_batch.summable_later(tensor):
            return None
        data = tensor.detach()
        if not data.is_floating_point():
            return False  # integers cannot hold inf or nan
        return self.batch.sum_later(data) if data.dtype in device_batch.SCREENED_BY_SUM else None

    def nonfinite(self, tensor: torch.Tensor) -> bool:
        """Overflow screening of one tensor, with the statistics the entry would show (cached)."""
        if not self.with_stats:
            return False
        if self.task == "overflow_check" and not self.save_files:
            found = _kernel_screen(tensor)  # the usual case, without the cache: reading the bits costs less
            if found is not None:
                return found
        if tensor.is_meta or not tensor.numel():
            return False
        stats = self.statistics(tensor)  # empty when the overflow screen's sum proved it finite
        return bool(stats) and any(is_nonfinite(stats.get(key)) for key in ("Max", "Min", "Mean", "Norm"))

    def __call__(self, tensor: torch.Tensor, data_stem: str) -> Any:
        """The tensor's entry in dump.json: a dict, or for the usual tensors its JSON text (``RawJSON``)."""
        if type(tensor) is not torch.Tensor:
            if parallel.is_dtensor(tensor):
                return self._shard_summary(tensor, data_stem)
            if self._quick and self.cut is None:
                text = self._collective_text(tensor)
                if text is not None:
                    return RawJSON(text)
        if self.save_files:
            self._saving_this = self.kv_cache is None or not self.kv_cache.holds(tensor, data_stem)
        if self.cut is not None:
            tensor = self._kept_part(tensor)
        if self._quick:
            text = self.quick_texts.text(tensor)
            if text is not None:
                return RawJSON(text)
        return special_tensors.by_kind(tensor, self._summary, self._unusual, data_stem)

    def _collective_text(self, tensor: torch.Tensor) -> str | None:
        """An asynchronous collective's result: the cached text of the plain tensor it holds, with its own
        requires_grad (the tensor inside takes no part in autograd); None for any other tensor subclass."""
        local = parallel.waited_collective(tensor)
        text = None if local is None else self.quick_texts.text(local)
        return None if text is None else _own_requires_grad(text, tensor.requires_grad, local.requires_grad)

    def _shard_summary(self, tensor: torch.Tensor, data_stem: str) -> Any:
        """A DTensor: its local shard's entry (statistics, checksum, file), and where the shard sits."""
        if self._quick and self.cut is None:
            local = tensor._local_tensor
            text = self.quick_texts.text(local)
            if text is not None:  # the usual shard: its cached text, with the DTensor's own keys spliced in
                return RawJSON(self._shard_text(tensor, local, text))
        local, shard = parallel.shard_of(tensor)
        summary = self(local, data_stem)
        if isinstance(summary, RawJSON):  # the local shard's text, measured in C: its keys are added to below
            summary = json.loads(summary.text)
        if not isinstance(summary, dict):
            return summary
        summary["requires_grad"] = tensor.requires_grad
        if self.shard_sums and isinstance(tensor, torch.nn.Parameter):
            summary["parameter"] = True
        summary["shard"] = shard
        return summary

    def _shard_text(self, tensor: torch.Tensor, local: torch.Tensor, text: str) -> str:
        """The local shard's summary text (which ends with its brace) as ``_shard_summary`` writes the DTensor's:
        the DTensor's requires_grad, its parameter mark, and where the shard sits, in that order. Kept by its
        parts: a tensor-parallel step passes the same unchanged weights' shards to every call."""
        wanted = tensor.requires_grad
        # a DTensor parameter is a DTensor marked _is_param (nn.Parameter's own isinstance test, without its
        # metaclass's Python call)
        marked = self.shard_sums and getattr(tensor, "_is_param", False) and type(local) is not torch.nn.Parameter
        where = parallel.shard_text(tensor)
        key = (text, where, wanted != local.requires_grad, marked)
        found = self._shard_texts.get(key)
        if found is None:
            text = _own_requires_grad(text, wanted, local.requires_grad)
            parameter = ',"parameter":true' if marked else ""
            found = f'{text[:-1]}{parameter},"shard":{where}}}'
            if len(self._shard_texts) > 4096:  # the texts of tensors long gone
                self._shard_texts.clear()
            self._shard_texts[key] = found
        return found

    @property
    def _quick(self) -> bool:
        """Whether a tensor's entry may be the per-call path's cached text (statistics alone, nothing saved)."""
        return self.quick_texts is not None and self.online is None and not self.save_files

    def _measure_waiting(self, tensor: torch.Tensor) -> device_batch.BatchedStats | None:
        """A plain device tensor's statistics into the batch, for the per-call path in C (which caches them);
        None for any other tensor (the general way)."""
        if tensor.is_quantized or not self._batched(tensor):
            return None
        return self.batch.measure_stats(tensor)

    def _kept_part(self, tensor: torch.Tensor) -> torch.Tensor:
        """The request's rows and the slice (see msprobe.core.recording.tensor_cuts); a view, so nothing is copied."""
        if tensor.layout != torch.strided or tensor.is_nested:
            return tensor
        index = self.cut.index(tensor.shape, isinstance(tensor, torch.nn.Parameter))
        return tensor if index is None else tensor[index]

    def _summary(self, tensor: torch.Tensor, data_stem: str) -> dict[str, Any]:
        dtype = tensor.dtype
        summary: dict[str, Any] = {
            "type": "torch.Tensor",
            "dtype": _DTYPE_NAMES.get(dtype) or str(dtype),
            "shape": list(tensor.shape),
        }
        has_data = not tensor.is_meta  # a meta tensor holds no data
        stats: dict[str, Any] = {}
        if self.with_stats:
            stats = self._statistics(tensor) if has_data and tensor.numel() else no_statistics()
            summary.update(stats)
        summary["requires_grad"] = tensor.requires_grad
        if len(stats) > 4:  # only an inf or nan adds the *_except_inf_nan keys: the usual tensor pays nothing
            _except_keys_last(summary)
        if self.shard_sums and has_data and "Max" in stats:
            summary["Sum"], summary["SumSq"] = (
                json_number(value) for value in self._cached("sums", tensor, parallel.float64_sums)
            )
            if isinstance(tensor, torch.nn.Parameter):
                summary["parameter"] = True
        waiting = getattr(stats.get("Max"), "stats", None)
        batched = isinstance(waiting, device_batch.BatchedStats)
        if batched:  # its *_except_inf_nan keys, if any, come with the read-back
            if waiting.values is None:
                waiting.hold(summary)
            else:  # read back already (a cached tensor seen again)
                summary.update(waiting.extremes)
        if self.with_crc and self.with_stats and has_data:  # a batched tensor's bytes go with the batch
            summary["md5"] = self._cached("crc", tensor, self.batch.checksum if batched else measuring.crc32_hex)
        elif self.with_xor and has_data:
            summary["md5"] = self._cached(
                "xor", tensor, self.batch.xor if self._batched(tensor) else measuring.xor_checksum_hex
            )
        if self.online is not None or self.save_files:
            self._attach_data(summary, tensor, data_stem, has_data)
        return summary

    def _attach_data(self, summary: dict[str, Any], tensor: torch.Tensor, data_stem: str, has_data: bool) -> None:
        """The values travel with the entry (online pre-check) or go to the entry's file (tensor task)."""
        if self.online is not None:
            file_name = f"{data_stem}.pt"
            self.online[file_name] = tensor_numpy(tensor)
            summary["data_name"] = file_name
        elif self.save_files and self.tensor_dir is not None and has_data and self._saving_this:
            file_name = f"{data_stem}.pt"
            data = parallel.plain(tensor.detach())
            if _needs_copy(data):
                data = data.clone(memory_format=torch.contiguous_format)
            if self.deferred:
                self._pending_files.append((data.clone(), self.tensor_dir / file_name))
            else:
                self._files.save(data.cpu(), self.tensor_dir / file_name)
            summary["data_name"] = file_name

    def _unusual(self, tensor: torch.Tensor, data_stem: str) -> dict[str, Any]:
        """Nested, sparse and quantized tensors: measured afresh each time (rare), through a plain form.

        A nested tensor (components of different sizes; nn.TransformerEncoder
        makes them from a padding mask) has no shape of its own: the entry
        shows the padded one (largest size per dimension, the shape the dense
        computation would have) and the statistics and CRC of the values it
        holds; its file holds the padded tensor, zeros in the padding. A
        sparse tensor shows the statistics of all its elements (those not
        stored are zeros) and the CRC of its dense form; a quantized one the
        statistics of its dequantized values and the CRC of its integers.
        Both are saved as they are (torch.save).
        """
        data = tensor.detach()
        if data.is_nested:  # padded only for a file or a receiver
            padded = self.online is not None or self.save_files
            stored = torch.nested.to_padded_tensor(data, 0.0) if padded else data
            shape, crc_source = special_tensors.padded_shape(data), special_tensors.nested_values(data)
        else:
            stored, shape, crc_source = data, data.shape, data.int_repr() if data.is_quantized else None
        summary: dict[str, Any] = {"type": "torch.Tensor", "dtype": str(tensor.dtype), "shape": list(shape)}
        if self.with_stats:
            summary.update(special_tensors.unusual_statistics(data))
        summary["requires_grad"] = tensor.requires_grad
        _except_keys_last(summary)
        if self.with_crc and self.with_stats:
            summary["md5"] = (
                measuring.crc32_hex(crc_source) if crc_source is not None else special_tensors.sparse_crc32_hex(data)
            )
        elif self.with_xor:
            summary["md5"] = measuring.xor_checksum_hex(crc_source if crc_source is not None else stored.to_dense())
        self._attach_data(summary, stored, data_stem, has_data=True)
        return summary


def _except_keys_last(summary: dict[str, Any]) -> None:
    """The reference writes the *_except_inf_nan keys after requires_grad."""
    for key in measuring.EXCEPT_INF_NAN:
        if key in summary:
            summary[key] = summary.pop(key)


def tensor_numpy(tensor: torch.Tensor) -> Any:
    from msprobe.pytorch.tensor_io import tensor_to_numpy

    return tensor_to_numpy(tensor)


def describe_object(value: Any) -> dict[str, Any] | None:
    """Torch objects that are not tensors, as the reference writes them."""
    if isinstance(value, torch.dtype):
        return {"type": "torch.dtype", "value": str(value)}
    if isinstance(value, torch.device):  # "cpu:None" for a device without an index, as the reference
        return {"type": "torch.device", "value": f"{value.type}:{value.index}"}
    if isinstance(value, torch.Size):
        return {"type": "torch.Size", "value": list(value)}
    if isinstance(value, torch.memory_format):
        return {"type": "torch.memory_format", "format": str(value).rsplit(".", 1)[-1]}
    return None
