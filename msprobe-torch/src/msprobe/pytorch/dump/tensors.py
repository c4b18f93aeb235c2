"""What a torch tensor becomes in dump.json: statistics, CRC-32, tensor files.

Statistics follow the reference's semantics (bool: Max=any, Min=all;
0-d: the value four times; integers measured as float32; complex on
magnitudes; an inf or nan extreme adds its *_except_inf_nan key; empty: the four keys, null)
except that float64 is measured in float64, not float32. One host sync per
tensor on a device: the four reductions are stacked and read together (on
the CPU they are read one by one, which is cheaper), and a tensor
seen again unchanged (one API's output is the next one's input) reuses its
statistics. "Unchanged" means the same object, version and memory, and no
in-place call the dump sees (recorded or only watched, see the recorder)
has written that memory since: writes through an alias
(``w.data.mul_(2)``), a collective (``all_reduce``), GradScaler's unscaling
and the fused optimizers leave torch's version counter as it was.
"""

from __future__ import annotations

import functools
import logging
import math
import sys
import weakref
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch

from msprobe.core.dump import float_stats
from msprobe.core.dump.checksum import crc32, xor_hex
from msprobe.core.dump.checksum import crc32_hex as checksum_hex
from msprobe.core.dump.file_pool import FilePool
from msprobe.core.dump.numbers import float32_mean, json_number, no_statistics
from msprobe.core.dump.overflow import is_nonfinite
from msprobe.core.dump.writer import RawJSON
from msprobe.core.switches import number, switched_on
from msprobe.pytorch import func_transforms
from msprobe.pytorch.dump import lane
from msprobe.pytorch.dump.pt_file import PtWriter, host_bytes

logger = logging.getLogger(__name__)
_MEASURED_AS_IS = (torch.float32, torch.float64)
_KERNEL_KINDS = {torch.float32: float_stats.FLOAT32, torch.float64: float_stats.FLOAT64}
_PLAIN_TYPES = (torch.Tensor, torch.nn.Parameter)  # no subclass that keeps its values elsewhere
SCREEN_KINDS = {**_KERNEL_KINDS, torch.float16: float_stats.FLOAT16, torch.bfloat16: float_stats.BFLOAT16}


EXCEPT_INF_NAN = ("Max_except_inf_nan", "Min_except_inf_nan")
_DTYPE_NAMES = {value: str(value) for value in vars(torch).values() if isinstance(value, torch.dtype)}


def _unwrapped(function: Any) -> Any:
    return getattr(function, "__msprobe_original__", function)


# the tool's own reductions call torch's functions, not the dump's wrappers around them (one hop less per tensor)
_sum = _unwrapped(torch.Tensor.sum)
_sum_into = _unwrapped(torch.sum)  # with dims and out=: into a cell of the batch's buffer
_vector_norm = _unwrapped(torch.linalg.vector_norm)
_aminmax = _unwrapped(torch.aminmax)
_copy = _unwrapped(torch.Tensor.copy_)
_mean = _unwrapped(torch.mean)


def _measure(tensor: torch.Tensor) -> dict[str, Any]:
    if tensor.dtype in _KERNEL_KINDS:  # the usual case, first: no detached view to make
        stats = kernel_stats(tensor, nonfinite=True)
        if stats is not None:
            return stats
    data = tensor.detach()
    dtype = data.dtype
    if dtype == torch.bool:
        return {"Max": bool(data.any()), "Min": bool(data.all()), "Mean": None, "Norm": None}
    if data.is_complex():
        data = data.abs()
    if not data.dim():
        return _scalar_stats(data.item())
    if dtype not in _MEASURED_AS_IS:  # widened from float16, bfloat16, an integer or complex magnitudes
        data = data if data.dtype in _MEASURED_AS_IS else data.float()
        stats = kernel_stats(data, nonfinite=True)
        if stats is not None:
            return stats
    low, high = torch.aminmax(data)
    if data.is_cpu:  # no transfer to save: reading the scalars is cheaper than stacking them
        maximum, minimum, mean, norm = high.item(), low.item(), _mean_from_sum(data), _vector_norm(data).item()
    else:  # one device-to-host transfer for the four
        maximum, minimum, mean, norm = torch.stack((high, low, data.mean(), torch.linalg.vector_norm(data))).tolist()
    stats: dict[str, Any] = {"Max": maximum, "Min": minimum, "Mean": mean, "Norm": norm}
    if _finite(maximum + minimum + mean + norm):  # the usual case: one check for all four
        return stats
    if not (_finite(maximum) and _finite(minimum)):
        stats.update(_extremes_except_inf_nan(data, maximum, minimum))
    return {key: json_number(value) for key, value in stats.items()}


def _scalar_stats(value: float | int) -> dict[str, Any]:
    """A 0-d tensor's value is all four statistics, as the reference writes them: an int for an integer tensor;
    inf or nan also as its own ``*_except_inf_nan`` pair (the one element is what is left of it)."""
    stats: dict[str, Any] = {"Max": value, "Min": value, "Mean": value, "Norm": value}
    if _finite(value):
        return stats
    stats["Max_except_inf_nan"] = stats["Min_except_inf_nan"] = value
    return {key: json_number(number) for key, number in stats.items()}


def _extremes_except_inf_nan(data: torch.Tensor, maximum: float, minimum: float) -> dict[str, float]:
    """As the reference: for an extreme that is inf or nan, the extreme of the finite values, else of those
    that are not nan (only infs left), else nan (all nan). A finite extreme gets no second key."""
    finite = data[torch.isfinite(data)]
    if not finite.numel():
        finite = data[~torch.isnan(data)]
    low, high = torch.aminmax(finite) if finite.numel() else (torch.tensor(math.nan),) * 2
    extremes = {}
    if not _finite(maximum):
        extremes["Max_except_inf_nan"] = high.item()
    if not _finite(minimum):
        extremes["Min_except_inf_nan"] = low.item()
    return extremes


def kernel_stats(data: torch.Tensor, nonfinite: bool = False) -> dict[str, Any] | None:
    """Statistics in one pass in C (see msprobe.core.dump.float_stats), or None where the kernels cannot read.

    ``nonfinite``: data holding an inf or nan is measured in C too, with its ``*_except_inf_nan`` pair, as
    torch would measure it (in torch that takes some ten operations on every such tensor of a step that
    overflowed, or of an attention mask); otherwise it is None, left to the caller.
    """
    if not (float_stats.AVAILABLE and data.is_cpu and data.dim()):
        return None
    address = _plain_memory(data)
    if address is None:
        return None
    kind = _KERNEL_KINDS[data.dtype]
    values = float_stats.stats_at(address, data.numel(), kind)
    if values is not None:
        return {"Max": values[0], "Min": values[1], "Mean": values[2], "Norm": values[3]}
    found = float_stats.nonfinite_stats_at(address, data.numel(), kind) if nonfinite else None
    if found is None:  # finite values whose float32 norm is beyond float32's range, say
        return None
    maximum, minimum, mean, norm, finite_max, finite_min = found
    stats = {"Max": maximum, "Min": minimum, "Mean": mean, "Norm": norm}
    if not _finite(maximum):
        stats["Max_except_inf_nan"] = finite_max
    if not _finite(minimum):
        stats["Min_except_inf_nan"] = finite_min
    return {key: json_number(value) for key, value in stats.items()}


def _plain_memory(data: torch.Tensor) -> int | None:
    """The address of a CPU tensor's values when they fill a block of memory there, in any order; else None.

    A permuted tensor (a transpose, attention's head split) fills its block
    too: statistics do not depend on the order (the sums, kept in double,
    only in the last bits of a double). Subclasses (wrappers, fake tensors)
    and negative views (whose memory holds the values' negation) are left
    to torch.
    """
    if type(data) not in _PLAIN_TYPES or data.is_neg() or not data.numel():
        return None
    if data.is_contiguous() or _fills_its_block(data):
        try:
            return data.data_ptr()  # the block's start: torch has no negative strides
        except RuntimeError:  # no storage of its own: torch.func's wrappers (vmap's batched tensors)
            return None
    return None


def _fills_its_block(data: torch.Tensor) -> bool:
    """No gaps and no element twice: with the dimensions sorted by stride, each stride is the size of those before."""
    expected = 1
    for size, stride in sorted(zip(data.shape, data.stride()), key=lambda pair: pair[1]):
        if size == 1:
            continue
        if stride != expected:
            return False
        expected *= size
    return True


def _mean_from_sum(data: torch.Tensor) -> float:
    """``data.mean()`` to the last bit, faster on the CPU: torch's sum kernel, then its float division."""
    total = _sum(data).item()
    if data.dtype == torch.float32:
        return float32_mean(total, data.numel())
    return total / data.numel()


class DeferredStats:
    """Four statistics still on the device; read back once, when the step's files are written."""

    __slots__ = ("_values", "tensor")

    def __init__(self, tensor: torch.Tensor):
        self.tensor = tensor
        self._values: list | None = None

    def value(self, index: int) -> Any:
        if self._values is None:
            self._values = [json_number(v) for v in self.tensor.tolist()]
            self.tensor = None
        return self._values[index]


class DeferredStat:
    __slots__ = ("index", "stats")

    def __init__(self, stats: DeferredStats, index: int):
        self.stats, self.index = stats, index

    def resolve(self) -> Any:
        return self.stats.value(self.index)


def _measure_deferred(tensor: torch.Tensor) -> dict[str, Any]:
    """Async mode: no host sync per tensor on a device. Inf/nan tensors get no *_except_inf_nan pair there.

    A CPU tensor has no device to wait for: it is measured at once, the same way as without async.
    """
    if tensor.is_cpu or tensor.dtype == torch.bool or tensor.is_complex() or tensor.dim() == 0:
        return _measure(tensor)  # nothing to wait for, or rare and cheap: measured at once
    data = tensor.detach()
    if data.dtype not in _MEASURED_AS_IS:
        data = data.float()
    low, high = torch.aminmax(data)
    stats = DeferredStats(torch.stack((high, low, data.mean(), torch.linalg.vector_norm(data))))
    return {key: DeferredStat(stats, index) for index, key in enumerate(("Max", "Min", "Mean", "Norm"))}


FORCE_DEVICE_PATH = switched_on("MSPROBE_FORCE_DEVICE_PATH")  # CPU tensors measured as device tensors are
STATS_BATCH = number("MSPROBE_STATS_BATCH", 256)  # device tensors whose statistics are read back together
CHECKSUM_BATCH_BYTES = 256 * 2**20  # md5 on a device: at most this many bytes joined for one transfer
_graph_task_id = getattr(torch._C, "_current_graph_task_id", lambda: -1)  # -1 outside a backward pass


def _queue_backward_callback(callback: Callable[[], None]) -> None:
    """Have autograd call ``callback`` once the running backward pass has ended (as DDP does for its buckets)."""
    torch.autograd.Variable._execution_engine.queue_callback(callback)


class BatchedStats:
    """One device tensor's four statistics, waiting in their row of a :class:`DeviceBatch`'s buffer."""

    __slots__ = ("batch", "data", "extremes", "holders", "place", "row", "values")

    def __init__(self, batch: DeviceBatch, place: tuple, row: int, data: torch.Tensor):
        self.batch, self.place, self.row, self.data = batch, place, row, data  # place: the buffer's device, dtype
        self.values: list | None = None
        self.holders: list[dict[str, Any]] = []  # the summaries showing them: they get *_except_inf_nan keys
        self.extremes: dict[str, Any] = {}

    def value(self, index: int) -> Any:
        if self.values is None:
            self.batch.read_back()  # the whole batch, never one tensor
        return self.values[index]

    def fill(self, row: list[float]) -> None:
        self.values = [json_number(v) for v in row]
        maximum, minimum = row[0], row[1]
        if not (_finite(maximum) and _finite(minimum)):  # rare: the finite extremes are read for this one alone
            extremes = _extremes_except_inf_nan(self.data, maximum, minimum)
            self.extremes = extremes = {key: json_number(value) for key, value in extremes.items()}
            self.batch.reads += 1
            for holder in self.holders:
                later = {key: holder.pop(key) for key in ("md5", "data_name") if key in holder}
                holder.update(extremes)  # after requires_grad, before md5, as the direct path writes them
                holder.update(later)
        self.data = None
        self.holders = []


class BatchedStat:
    __slots__ = ("index", "stats")

    def __init__(self, stats: BatchedStats, index: int):
        self.stats, self.index = stats, index

    def resolve(self) -> Any:
        return self.stats.value(self.index)


class BatchedSum:
    """One device tensor's sum for the overflow screen, waiting in a cell of a row of a :class:`DeviceBatch`'s
    buffer (four sums to a row)."""

    __slots__ = ("batch", "cell", "data", "place", "row", "value", "version")

    def __init__(self, batch: DeviceBatch, place: tuple, row: int, cell: int, data: torch.Tensor):
        self.batch, self.place, self.row, self.cell = batch, place, row, cell
        self.data, self.version = data, data._version  # to tell a write since the sum was taken
        self.value: float | None = None

    def fill(self, row: list[float]) -> None:
        self.value = row[self.cell]

    def finite(self) -> bool:
        if self.value is None:
            self.batch.read_back()  # the whole batch, never one tensor
        return _finite(self.value)

    def written_since(self) -> bool:
        """Whether the tensor was written in place after its sum was taken (its values now are others)."""
        return self.data._version != self.version


class BatchedChecksum:
    """One device tensor's checksum, waiting for its batch: for CRC-32 ``data`` is the tensor, whose bytes
    move to the host with the batch's; for xor it is the one word already folded on the device."""

    __slots__ = ("batch", "data", "text")

    def __init__(self, batch: DeviceBatch, data: torch.Tensor):
        self.batch, self.data = batch, data
        self.text: str | None = None

    def resolve(self) -> str | None:
        if self.text is None and self.data is not None:
            self.batch.read_back()
        return self.text


def xor_word(tensor: torch.Tensor) -> torch.Tensor:
    """The XOR of a tensor's bytes as little-endian 64-bit words (the last zero-padded), computed where the
    tensor lives: halves XORed together until one word is left, so log2(words) kernels and no host read.
    Equals msprobe.core.dump.checksum.xor_hex on the same bytes (XOR is associative and commutative)."""
    data = tensor.detach().resolve_conj().resolve_neg()
    if not data.is_contiguous():
        data = data.contiguous()
    raw = data.reshape(-1).view(torch.uint8)
    if raw.numel() % 8:
        raw = torch.cat((raw, raw.new_zeros(8 - raw.numel() % 8)))
    words = raw.view(torch.int64)
    if words.numel() == 0:
        return torch.zeros(1, dtype=torch.int64, device=data.device)
    while words.numel() > 1:
        half = words.numel() // 2
        folded = torch.bitwise_xor(words[:half], words[half : 2 * half])
        if words.numel() % 2:  # the odd word out joins the first
            folded[:1] ^= words[-1:]
        words = folded
    return words


class DeviceBatch:
    """Statistics of device tensors computed on the device and read back together, not one host sync each.

    Each tensor's Max, Min, Mean and Norm are written by their reductions
    straight into the next row of a buffer allocated once per device and
    dtype (``limit`` rows of four values; float32 for all but float64
    tensors, as the reductions give them). The rows are read back in one
    transfer per device when the batch holds ``limit`` tensors, when a
    top-level module's call ends, when a backward pass ends, at step end,
    and whenever a value is needed before that (the overflow check's look
    at outputs, say). Only a tensor whose extremes are inf or nan costs one
    more read, for its ``*_except_inf_nan`` pair. ``reads`` counts the host
    reads.
    """

    def __init__(self, limit: int = STATS_BATCH):
        self.limit = max(1, limit)
        self.pending: list[BatchedStats] = []
        self.checksums: list[BatchedChecksum] = []  # md5: the tensors' bytes, moved to the host together
        self.xors: list[BatchedChecksum] = []  # xor: one word per tensor, folded on the device
        self.checksum_bytes = 0  # of the tensors waiting for their CRC-32, read back at byte_limit
        self.byte_limit = CHECKSUM_BATCH_BYTES
        self.reads = 0
        self.on_read: Callable[[], None] | None = None  # the collector journals the entries just completed
        # per (device, dtype): limit rows of Max, Min, Mean and Norm, each row's four cells as views made once
        self.buffers: dict[tuple, torch.Tensor] = {}
        self.cells: dict[tuple, list[tuple[torch.Tensor, ...]]] = {}
        self.rows_used: dict[tuple, int] = {}
        # the overflow screen's sums, four to a row: per place, the row being filled and its next cell
        self.open_sum_rows: dict[tuple, tuple[int, int]] = {}
        self.sum_rows = 0  # rows begun by sums since the last read-back
        self.sums = 0  # and the sums in them
        self.write_out = True  # the reductions write into the buffer (off if the device lacks their out= kernels)
        self.backward_task = -1  # the backward pass whose end reads the batch back (-1: none queued, -2: unable)
        # the recorder's read_back at the end of a backward pass, as the tool's own work (its torch calls undumped);
        # it runs inside the user's backward(), so it must not raise: the recorder's guard reports a failure
        self.after_backward: Callable[[], None] | None = None

    def _next_row(self, place: tuple) -> tuple[list[tuple[torch.Tensor, ...]], int]:
        """The cells of the buffer for ``place`` (device, dtype), made at its first use, and its next free row."""
        cells = self.cells.get(place)
        if cells is None:
            with torch.inference_mode(False):  # made in an inference_mode block, it could not be written after it
                buffer = self.buffers[place] = torch.empty((self.limit, 4), dtype=place[1], device=place[0])
                cells = self.cells[place] = [tuple(row.unbind(0)) for row in buffer.unbind(0)]
        row = self.rows_used.get(place, 0)
        if row >= self.limit:  # full (sums share rows, so rows and items are not counted alike): read it first
            self.read_back()
            row = 0
        self.rows_used[place] = row + 1
        return cells, row

    def sum_later(self, data: torch.Tensor) -> BatchedSum:
        """The overflow screen's sum of a floating tensor, into the batch (accumulated in float32, or float64
        for float64 tensors, without a copy); read back with the rest."""
        place = (data.device, torch.float64 if data.dtype == torch.float64 else torch.float32)
        open_row = self.open_sum_rows.get(place)
        if open_row is not None and open_row[1] < 4 and self.rows_used.get(place, 0) > open_row[0]:
            row, cell_index = open_row[0], open_row[1]
            cells = self.cells[place]
        else:
            cells, row = self._next_row(place)
            cell_index = 0
        self.open_sum_rows[place] = (row, cell_index + 1)
        cell = cells[row][cell_index]
        if self.write_out:
            try:
                _sum_into(data, tuple(range(data.dim())), dtype=place[1], out=cell)
            except Exception as error:  # a backend without this out= kernel: summed, then copied
                self.write_out = False
                logger.debug("msprobe: device sums copied, not written in place (%s)", error)
        if not self.write_out:
            _copy(cell, _sum(data, dtype=place[1]))
        item = BatchedSum(self, place, row, cell_index, data)
        self.pending.append(item)
        self.sums += 1
        if cell_index == 0:
            self.sum_rows += 1
        self._added()
        return item

    def measure(self, tensor: torch.Tensor) -> dict[str, Any]:
        held = data = tensor.detach()
        if data.dtype not in _MEASURED_AS_IS:
            data = data.float()  # a temporary: the batch holds the tensor itself, never this copy (bf16: 2x)
        place = (data.device, data.dtype)
        cells, row = self._next_row(place)
        if self.write_out:
            try:
                maximum, minimum, mean, norm = cells[row]
                _aminmax(data, out=(minimum, maximum))  # three kernels, no stack or copy, and no sync
                _mean(data, out=mean)
                _vector_norm(data, out=norm)
            except Exception as error:  # a backend without these out= kernels: stacked and copied instead
                self.write_out = False
                logger.debug("msprobe: device statistics stacked, not written in place (%s)", error)
        if not self.write_out:
            low, high = _aminmax(data)
            _copy(self.buffers[place][row], torch.stack((high, low, _mean(data), _vector_norm(data))))
        stats = BatchedStats(self, place, row, held)
        self.pending.append(stats)
        self._added()
        return {key: BatchedStat(stats, index) for index, key in enumerate(("Max", "Min", "Mean", "Norm"))}

    def _added(self) -> None:
        if self.waiting() >= self.limit:
            self.read_back()
        elif self.backward_task == -1 and self.after_backward is not None:
            task = _graph_task_id()
            if task != -1:  # inside a backward pass: read back when it ends
                self.backward_task = task
                try:
                    _queue_backward_callback(self._backward_ended)
                except Exception as error:  # an engine without final callbacks: the limit and step end still read
                    self.backward_task = -2  # not asked again
                    logger.debug("msprobe: no read-back at the end of backward passes (%s)", error)

    def _backward_ended(self) -> None:
        """Run by autograd when the backward pass ends."""
        self.backward_task = -1
        self.after_backward()

    def checksum(self, tensor: torch.Tensor) -> BatchedChecksum:
        data = tensor.detach().resolve_conj().resolve_neg()
        if not data.is_contiguous():
            data = data.contiguous()
        item = BatchedChecksum(self, data)
        self.checksums.append(item)
        self.checksum_bytes += data.numel() * data.element_size()
        if self.checksum_bytes >= self.byte_limit:  # the batch's bytes are joined on the device to move them
            self.read_back()
        else:
            self._added()
        return item

    def xor(self, tensor: torch.Tensor) -> BatchedChecksum:
        item = BatchedChecksum(self, xor_word(tensor))
        self.xors.append(item)
        self._added()
        return item

    def waiting(self) -> int:
        """Rows and checksums waiting: a row holds one tensor's statistics, or up to four sums."""
        return len(self.pending) - self.sums + self.sum_rows + len(self.checksums) + len(self.xors)

    def read_back(self) -> None:
        pending, self.pending = self.pending, []
        self.open_sum_rows.clear()
        self.sum_rows = self.sums = 0
        checksums, self.checksums = self.checksums, []
        self.checksum_bytes = 0
        xors, self.xors = self.xors, []
        if checksums:
            self._read_checksums(checksums)
        if xors:
            self._read_xors(xors)
        if not pending:
            if (checksums or xors) and self.on_read is not None:
                self.on_read()
            return
        for group in _by_device(pending, lambda stats: stats.place[0]):
            rows = self._read_rows({stats.place for stats in group})
            for stats in group:
                row = rows[stats.place][stats.row]
                try:
                    stats.fill(row)
                except Exception:  # its except pair could not be read: the four statistics stand
                    stats.values = [json_number(v) for v in row]
                    stats.data = None
        if self.on_read is not None:
            self.on_read()

    def _read_rows(self, places: set[tuple]) -> dict[tuple, list[list[float]]]:
        """The used rows of one device's buffers, in one host read (float32 rows widened to float64 on the
        device, exactly, when a float64 buffer is read with them)."""
        used = {place: self.rows_used.pop(place, 0) for place in places}
        order = list(places)
        try:
            parts = [self.buffers[place][: used[place]] for place in order]
            if len(parts) > 1:
                parts = [part.double() for part in parts]
            joined = (torch.cat(parts) if len(parts) > 1 else parts[0]).tolist()  # the batch's one host read
            rows, start = {}, 0
            for place in order:
                rows[place], start = joined[start : start + used[place]], start + used[place]
        except Exception:  # one odd row: each is read alone rather than all lost
            rows = {place: [_row_alone(self.buffers[place], row) for row in range(used[place])] for place in order}
        self.reads += 1
        return rows

    def _read_checksums(self, checksums: list[BatchedChecksum]) -> None:
        """The bytes of every tensor waiting for its CRC-32, moved to the host in one transfer per device."""
        for group in _by_device(checksums, lambda item: item.data.device):
            try:
                parts = [item.data.reshape(-1).view(torch.uint8) for item in group]
                blob = (torch.cat(parts) if len(parts) > 1 else parts[0]).cpu().numpy()  # one alone: no device copy
                self.reads += 1
                offset = 0
                for item in group:
                    size = item.data.numel() * item.data.element_size()
                    item.text = checksum_hex(blob[offset : offset + size])
                    offset += size
            except Exception:  # one odd tensor: each is read alone rather than all lost
                for item in group:
                    item.text = crc32_hex(item.data)
                    self.reads += 1
            for item in group:
                item.data = None

    def _read_xors(self, xors: list[BatchedChecksum]) -> None:
        for group in _by_device(xors, lambda item: item.data.device):
            words = torch.cat([item.data for item in group]).tolist()  # the batch's one host read
            self.reads += 1
            for item, word in zip(group, words):
                item.text, item.data = f"{word & 0xFFFFFFFFFFFFFFFF:016x}", None

    def take_reads(self) -> int:
        reads, self.reads = self.reads, 0
        return reads


def _by_device(items: list, device_of: Callable[[Any], Any]) -> list[list]:
    """The items in groups of one device each (one transfer per device), in their order."""
    groups: dict[Any, list] = {}
    for item in items:
        groups.setdefault(device_of(item), []).append(item)
    return list(groups.values())


def device_path_active() -> bool:
    """Whether statistics may be measured on a device: forced, or a CUDA or Ascend device is there."""
    if FORCE_DEVICE_PATH or "torch_npu" in sys.modules:
        return True
    try:
        return torch.cuda.is_available()
    except Exception:  # a broken driver: no device to measure on
        return False


def _row_alone(buffer: torch.Tensor, row: int) -> list[float]:
    try:
        return buffer[row].tolist()
    except Exception:  # unreadable now: shown as nan, never as a half-written entry
        return [math.nan] * 4


def _plain_device_tensor(tensor: torch.Tensor) -> bool:
    """What the batch measures: a plain dense tensor with elements, not bool or complex (rare and cheap), and
    one whose values can still be read after the call: not inside a torch.func transform (its wrappers are
    gone by then), not an inference tensor, not meta."""
    return (
        type(tensor) in _PLAIN_TYPES
        and tensor.layout == torch.strided
        and tensor.dim() > 0
        and tensor.dtype != torch.bool
        and not tensor.is_complex()
        and not tensor.is_meta
        and tensor.numel() > 0
        and not tensor.is_inference()
        and not func_transforms.wrapped(tensor)
    )


def _summable_later(tensor: torch.Tensor) -> bool:
    """What the overflow screen's sum can wait for: as the batch's statistics, and a tensor of one element (an
    optimizer's step count, a loss), which a sum reads as well as any."""
    return (
        type(tensor) in _PLAIN_TYPES
        and tensor.layout == torch.strided
        and not tensor.is_meta
        and tensor.numel() > 0
        and not tensor.is_inference()
        and not func_transforms.wrapped(tensor)
    )


_SCREENED_BY_SUM = (torch.float32, torch.float16, torch.bfloat16, torch.float64)


def _measure_range(tensor: torch.Tensor, batch: DeviceBatch | None = None) -> dict[str, Any]:
    """Overflow screening. A finite sum proves every element finite (inf and nan propagate through it),
    and one sum is cheaper than a min/max pass; only a non-finite sum (or one that overflowed) is looked into.
    Each read from a device is counted in ``batch.reads``: the screen cannot wait for a batch (see
    docs/overflow_check.md).
    """
    data = tensor.detach()
    if data.dtype not in _SCREENED_BY_SUM or not data.dim():  # the usual floating tensor skips these checks
        if data.dtype == torch.bool or not data.dim() or data.is_complex():
            _count_read(batch, data)
            return _measure(tensor)
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


def _count_read(batch: DeviceBatch | None, data: torch.Tensor) -> None:
    if batch is not None and (FORCE_DEVICE_PATH or not data.is_cpu):
        batch.reads += 1


def _kernel_screen(data: torch.Tensor) -> bool | None:
    """Whether a CPU tensor holds an inf or nan, from its exponent bits read in C; None where they cannot be read
    (and with the device path forced, which screens as on a device)."""
    kind = SCREEN_KINDS.get(data.dtype)
    if kind is None or not float_stats.AVAILABLE or not data.is_cpu or FORCE_DEVICE_PATH:
        return None
    address = _plain_memory(data)
    return None if address is None else float_stats.any_nonfinite_at(address, data.numel(), kind)


def _proved_finite(data: torch.Tensor, batch: DeviceBatch | None = None) -> bool:
    """Every element is finite: the exponent bits on the CPU, else a finite sum (one read on any device;
    inf and nan propagate through a sum, but a sum of finite values may also overflow).
    """
    found = _kernel_screen(data)
    if found is not None:
        return not found
    _count_read(batch, data)
    return _finite(_sum(data).item())


def _finite(value: float) -> bool:
    return math.isfinite(value)


def _host_contiguous(tensor: torch.Tensor) -> torch.Tensor:
    data = tensor.detach()
    if not data.is_cpu:
        data = data.cpu()
    return data if data.is_contiguous() else data.contiguous()


def xor_checksum_hex(tensor: torch.Tensor) -> str:
    """``summary_mode: "xor"``: see msprobe.core.dump.checksum.xor_hex."""
    return xor_hex(host_bytes(_host_contiguous(tensor)))


def crc32_hex(tensor: torch.Tensor) -> str:
    """CRC-32 of the tensor's bytes (the reference calls it md5), as 8 hex digits; the bytes are read in place."""
    return checksum_hex(host_bytes(_host_contiguous(tensor)))


def _storage_address(tensor: torch.Tensor) -> int | None:
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
    address to the count at its last write. The C lane reads and updates
    both fields directly (``_lane.c``), so their names are its interface.
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


class TensorSummarizer:
    """Summarizes tensors for one run; caches statistics of unchanged tensors within a step."""

    def __init__(self, task: str, summary_mode: str, deferred: bool = False, live_diff: bool = False):
        self.task = task
        self.deferred = deferred
        self._pending_files: list[tuple[torch.Tensor, Path]] = []
        self._pool: FilePool | None = None  # async mode's file threads
        self._closed = False
        self._files = PtWriter()
        self.with_xor = summary_mode == "xor"  # 26.x: an XOR checksum as md5, and no statistics
        self.with_stats = task in ("statistics", "tensor", "overflow_check") and not self.with_xor
        self.with_crc = summary_mode == "md5"
        self.save_files = task == "tensor"
        self.online: dict[str, Any] | None = None  # data_name -> array, when streaming to a receiver
        self.tensor_dir: Path | None = None
        # (id, kind) -> (weak reference, version, data address, storage address, write count when measured, value)
        self._cache: dict[tuple[int, str], tuple[Any, int, int, int, int, Any]] = {}
        self.write_log = WriteLog()
        self.caches = self.with_stats or self.with_crc or self.with_xor
        # the usual entry, statistics of a plain CPU float tensor, measured and cached as JSON text in C (_lane.c):
        # the bulk of a dump; everything else, and any doubt, goes the general way below, which writes the same
        # md5 too, its CRC-32 cached with the statistics; not for the live diff, which reads each call's values
        quick = task == "statistics" and not self.with_xor and not deferred and not (self.with_crc and live_diff)
        checksum = crc32_hex if self.with_crc else None
        self.quick_texts = lane.summaries(self.write_log, checksum) if quick and not FORCE_DEVICE_PATH else None
        # device tensors' statistics, read back in batches (not with async_dump, which reads at step end)
        batched = (self.with_stats or self.with_xor) and not deferred
        self.batch = DeviceBatch() if batched and device_path_active() else None

    def set_tensor_dir(self, folder: Path | None) -> None:
        self.tensor_dir = folder

    def set_saving(self, on: bool) -> None:
        """Overflow check writes tensor files only for the calls it keeps."""
        self.save_files = on

    def clear(self) -> None:
        self._cache.clear()
        if self.quick_texts is not None:
            self.quick_texts.clear()
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
        return _by_kind(tensor, self._statistics, _unusual_statistics)

    def _statistics(self, tensor: torch.Tensor) -> dict[str, Any]:
        if self.task == "overflow_check" and not self.save_files:
            return self._cached("range", tensor, self._screen)  # full statistics only for the calls kept
        if self.deferred:
            return self._cached("stats", tensor, _measure_deferred)
        if self._batched(tensor):
            return self._cached("stats", tensor, self.batch.measure)
        return self._cached("stats", tensor, _measure)

    def _screen(self, tensor: torch.Tensor) -> dict[str, Any]:
        return _measure_range(tensor, self.batch)

    def _batched(self, tensor: torch.Tensor) -> bool:
        return self.batch is not None and (FORCE_DEVICE_PATH or not tensor.is_cpu) and _plain_device_tensor(tensor)

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
        """The cache's rule (see the module's docstring; _lane.c keeps the same for the quick texts) for an entry
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
        found = _kernel_screen(tensor.detach()) if type(tensor) in _PLAIN_TYPES else None
        return self.nonfinite(tensor) if found is None else found

    def nonfinite_later(self, tensor: torch.Tensor) -> bool | BatchedSum | None:
        """The overflow check's screen of a device tensor without a read: its sum waits in the batch (see
        ``ValueEncoder.screen_later``). False: it cannot hold inf or nan; None: it is screened now instead."""
        if not self.with_stats:
            return False
        if self.task != "overflow_check" or self.save_files or self.batch is None:
            return None
        if not (FORCE_DEVICE_PATH or not tensor.is_cpu) or not _summable_later(tensor):
            return None
        data = tensor.detach()
        if not data.is_floating_point():
            return False  # integers cannot hold inf or nan
        return self.batch.sum_later(data) if data.dtype in _SCREENED_BY_SUM else None

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
        if self.quick_texts is not None and self.online is None and not self.save_files:
            text = self.quick_texts.text(tensor)
            if text is not None:
                return RawJSON(text)
        return _by_kind(tensor, self._summary, self._unusual, data_stem)

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
        waiting = stats.get("Max")
        if isinstance(waiting, BatchedStat):  # its *_except_inf_nan keys, if any, come with the read-back
            if waiting.stats.values is None:
                waiting.stats.holders.append(summary)
            else:  # read back already (a cached tensor seen again)
                summary.update(waiting.stats.extremes)
        if self.with_crc and self.with_stats and has_data:
            batched = self.batch is not None and isinstance(waiting, BatchedStat)  # the bytes go with the batch
            summary["md5"] = self._cached("crc", tensor, self.batch.checksum if batched else crc32_hex)
        elif self.with_xor and has_data:
            summary["md5"] = self._cached("xor", tensor, self.batch.xor if self._batched(tensor) else xor_checksum_hex)
        if self.online is not None or self.save_files:
            self._attach_data(summary, tensor, data_stem, has_data)
        return summary

    def _attach_data(self, summary: dict[str, Any], tensor: torch.Tensor, data_stem: str, has_data: bool) -> None:
        """The values travel with the entry (online pre-check) or go to the entry's file (tensor task)."""
        if self.online is not None:
            file_name = f"{data_stem}.pt"
            self.online[file_name] = tensor_numpy(tensor)
            summary["data_name"] = file_name
        elif self.save_files and self.tensor_dir is not None and has_data:
            file_name = f"{data_stem}.pt"
            data = tensor.detach()
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
            shape, crc_source = padded_shape(data), nested_values(data)
        else:
            stored, shape, crc_source = data, data.shape, data.int_repr() if data.is_quantized else None
        summary: dict[str, Any] = {"type": "torch.Tensor", "dtype": str(tensor.dtype), "shape": list(shape)}
        if self.with_stats:
            summary.update(_unusual_statistics(data))
        summary["requires_grad"] = tensor.requires_grad
        _except_keys_last(summary)
        if self.with_crc and self.with_stats:
            summary["md5"] = crc32_hex(crc_source) if crc_source is not None else sparse_crc32_hex(data)
        elif self.with_xor:
            summary["md5"] = xor_checksum_hex(crc_source if crc_source is not None else stored.to_dense())
        self._attach_data(summary, stored, data_stem, has_data=True)
        return summary


def _except_keys_last(summary: dict[str, Any]) -> None:
    """The reference writes the *_except_inf_nan keys after requires_grad."""
    for key in EXCEPT_INF_NAN:
        if key in summary:
            summary[key] = summary.pop(key)


def _is_unusual(tensor: torch.Tensor) -> bool:
    return tensor.is_nested or tensor.is_quantized or tensor.layout not in (torch.strided, torch.jagged)


def _by_kind(tensor: torch.Tensor, usual: Callable[..., Any], unusual: Callable[..., Any], *args: Any) -> Any:
    """``usual(tensor, *args)``; for a nested, sparse or quantized tensor ``unusual(tensor, *args)``; inside
    torch.func transforms ``usual`` on the tensor beneath (under vmap the whole batch). The usual tensors
    pay one type check: the others are told apart only once ``usual`` has raised.
    """
    if type(tensor) is not torch.Tensor and tensor.is_nested:  # the jagged layout is a subclass
        return unusual(tensor, *args)
    try:
        return usual(tensor, *args)
    except RuntimeError:  # NotImplementedError (an op the layout lacks) included
        if func_transforms.wrapped(tensor):
            with func_transforms.plain_dispatch():
                return usual(func_transforms.physical(tensor), *args)
        if _is_unusual(tensor):
            return unusual(tensor, *args)
        raise


def nested_values(tensor: torch.Tensor) -> torch.Tensor:
    """The values a nested tensor holds, components one after another, flat."""
    return torch.cat([component.reshape(-1) for component in tensor.detach().unbind()])


def padded_shape(tensor: torch.Tensor) -> list[int]:
    """A nested tensor's shape when padded: its component count, then the largest size in each dimension."""
    shapes = [component.shape for component in tensor.detach().unbind()]
    return [len(shapes), *(max(sizes) for sizes in zip(*shapes))] if shapes else [0]


def _unusual_statistics(tensor: torch.Tensor) -> dict[str, Any]:
    """Statistics of a nested, sparse or quantized tensor, measured afresh each time (rare)."""
    if not tensor.numel():
        return no_statistics()
    if tensor.is_nested:
        return _measure(nested_values(tensor))
    if tensor.is_quantized:
        return _measure(tensor.detach().dequantize())
    return _sparse_statistics(tensor)


def _sparse_statistics(tensor: torch.Tensor) -> dict[str, Any]:
    """All elements counted, those not stored as the zeros they are; no dense copy is made."""
    data = tensor.detach()
    if data.layout == torch.sparse_coo:
        data = data.coalesce()  # duplicate indices add up
    values = data.values().reshape(-1)
    stored, count = values.numel(), data.numel()
    if not stored:
        zero = False if data.dtype == torch.bool else 0.0
        return {
            "Max": zero,
            "Min": zero,
            "Mean": None if zero is False else 0.0,
            "Norm": None if zero is False else 0.0,
        }
    stats = _measure(values)
    if stored == count:
        return stats
    for high, low in (("Max", "Min"), ("Max_except_inf_nan", "Min_except_inf_nan")):
        if isinstance(stats.get(high), bool):
            stats[low] = False
        elif isinstance(stats.get(high), float):  # not "nan" or "inf" text, not None
            stats[high], stats[low] = max(stats[high], 0.0), min(stats[low], 0.0)
    if isinstance(stats.get("Mean"), float):
        stats["Mean"] = stats["Mean"] * stored / count
    return stats


_DENSE_PIECE_BYTES = 16 << 20  # a sparse tensor's dense form is checksummed this much at a time


def sparse_crc32_hex(tensor: torch.Tensor) -> str:
    """CRC-32 of a sparse tensor's dense form, built a block of rows at a time: never the whole dense tensor.

    The CRC equals that of ``tensor.to_dense()`` (the md5 of a dense tensor
    of the same values), while the memory it takes is one block of rows
    (16 MB) beside the stored values: a sparse gradient of an embedding
    table with millions of rows would need gigabytes in its dense form.
    """
    data = tensor.detach()
    data = (data if data.layout == torch.sparse_coo else data.to_sparse_coo()).coalesce()  # sorted by row
    shape, indices, values = data.shape, data.indices(), data.values()
    row_elements = math.prod(shape[1:])
    if not data.numel():
        return checksum_hex(b"")
    rows_per_piece = max(1, _DENSE_PIECE_BYTES // max(1, row_elements * data.element_size()))
    starts = torch.arange(0, shape[0], rows_per_piece, device=indices.device)
    bounds = torch.searchsorted(indices[0].contiguous(), torch.cat([starts, starts.new_tensor([shape[0]])])).tolist()
    running = 0
    for piece, first_row in enumerate(starts.tolist()):
        last_row = min(shape[0], first_row + rows_per_piece)
        dense = torch.zeros((last_row - first_row, *shape[1:]), dtype=data.dtype, device=values.device)
        low, high = bounds[piece], bounds[piece + 1]
        if high > low:
            where = indices[:, low:high].clone()
            where[0] -= first_row
            dense[tuple(where)] = values[low:high]
        running = crc32(host_bytes(dense.cpu()), running)
    return f"{running:08x}"


def tensor_numpy(tensor: torch.Tensor) -> Any:
    from msprobe.pytorch.tensor_io import tensor_to_numpy

    return tensor_to_numpy(tensor.detach().cpu()).copy()


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
