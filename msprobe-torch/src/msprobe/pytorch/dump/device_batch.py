"""Device statistics read back in batches: no host sync per tensor on a GPU or NPU.

``FORCE_DEVICE_PATH`` (``MSPROBE_FORCE_DEVICE_PATH=1``) sends CPU tensors
this way too, so the path is tested where there is no device; it is the one
switch every reader looks up here, at the time of reading.
"""

from __future__ import annotations

import logging
import math
import sys
from collections.abc import Callable, Mapping
from types import MappingProxyType
from typing import Any

import orjson
import torch

from msprobe.core.dump.checksum import crc32_hex as checksum_hex
from msprobe.core.dump.numbers import json_number
from msprobe.core.dump.pending_values import PLACEHOLDERS
from msprobe.core.dump.writer import RawJSON, encode_json, for_orjson
from msprobe.core.switches import number, switched_on
from msprobe.pytorch import func_transforms
from msprobe.pytorch.dump import measuring
from msprobe.pytorch.dump.measuring import PendingStat
from msprobe.pytorch.dump.pt_file import host_bytes

logger = logging.getLogger(__name__)

FORCE_DEVICE_PATH = switched_on("MSPROBE_FORCE_DEVICE_PATH")  # CPU tensors measured as device tensors are
STATS_BATCH = number("MSPROBE_STATS_BATCH", 256)  # device tensors whose statistics are read back together
CHECKSUM_BATCH_BYTES = 256 * 2**20  # md5 on a device: at most this many bytes joined for one transfer
_NO_EXTREMES: Mapping[str, Any] = MappingProxyType({})  # finite extremes: no *_except_inf_nan keys
_graph_task_id = getattr(torch._C, "_current_graph_task_id", lambda: -1)  # -1 outside a backward pass


def _queue_backward_callback(callback: Callable[[], None]) -> None:
    """Have autograd call ``callback`` once the running backward pass has ended (as DDP does for its buckets)."""
    torch.autograd.Variable._execution_engine.queue_callback(callback)


class BatchedStats:
    """One device tensor's four statistics, waiting in their row of a :class:`DeviceBatch`'s buffer."""

    __slots__ = ("batch", "data", "extremes", "holders", "place", "row", "texts", "values")

    def __init__(self, batch: DeviceBatch, place: tuple, row: int, data: torch.Tensor):
        # few objects per tensor: each one made is garbage-collector work in a process that holds many
        self.batch, self.place, self.row, self.data = batch, place, row, data  # place: the buffer's device, dtype
        self.values: list | None = None
        self.holders: list[dict[str, Any]] | None = None  # summary dicts showing them: they get the extremes
        self.extremes: Mapping[str, Any] = _NO_EXTREMES
        self.texts: tuple[str, str] | None = None  # the four as summary members, and the extremes (see members)

    def pending(self) -> dict[str, Any]:
        """The four as a summary's values, each read with the batch when first asked for."""
        return {"Max": PendingStat(self, 0), "Min": PendingStat(self, 1), "Mean": PendingStat(self, 2),
                "Norm": PendingStat(self, 3)}  # fmt: skip

    def hold(self, summary: dict[str, Any]) -> None:
        """``summary`` shows these statistics: it gets the extremes' keys if the read-back finds inf or nan."""
        if self.holders is None:
            self.holders = []
        self.holders.append(summary)

    def members(self) -> tuple[str, str]:
        """``"Max":..,"Min":..,"Mean":..,"Norm":..`` and the extremes' members to follow ``requires_grad`` (empty
        for finite extremes), as the writer encodes a summary's values; made once for all the summaries."""
        if self.texts is None:
            if self.values is None:
                self.batch.read_back()
            # one encoding of the four (numbers hold no comma), each as the writer encodes it alone
            maximum, minimum, mean, norm = orjson.dumps(self.values, default=for_orjson).decode()[1:-1].split(",")
            four = f'"Max":{maximum},"Min":{minimum},"Mean":{mean},"Norm":{norm}'
            extremes = ""
            if self.extremes:
                extremes = "".join(f",{encode_json(key)}:{encode_json(value)}" for key, value in self.extremes.items())
            self.texts = (four, extremes)
        return self.texts

    def value(self, index: int) -> Any:
        if self.values is None:
            self.batch.read_back()  # the whole batch, never one tensor
        return self.values[index]

    def fill(self, row: list[float]) -> None:
        maximum, minimum = row[0], row[1]
        if math.isfinite(maximum + minimum + row[2] + row[3]):  # the usual row: no value to mark, no extremes
            self.values = row
        else:
            self.values = [json_number(v) for v in row]
            if not (math.isfinite(maximum) and math.isfinite(minimum)):  # rare: the finite extremes, read alone
                extremes = measuring.extremes_except_inf_nan(self.data, maximum, minimum)
                self.extremes = extremes = {key: json_number(value) for key, value in extremes.items()}
                self.batch.reads += 1
                for holder in self.holders or ():
                    later = {key: holder.pop(key) for key in ("md5", "data_name") if key in holder}
                    holder.update(extremes)  # after requires_grad, before md5, as the direct path writes them
                    holder.update(later)
        self.data = None
        self.holders = None


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
        return math.isfinite(self.value)

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


def reduce_into(data: torch.Tensor, row: tuple[torch.Tensor, ...]) -> None:
    """``data``'s Max, Min, Mean and Norm written into the four cells of ``row``: three kernels, no stack or copy,
    and no sync (``data`` is float32 or float64 already, see ``DeviceBatch.measure_stats``)."""
    maximum, minimum, mean, norm = row
    measuring.torch_aminmax(data, out=(minimum, maximum))
    measuring.torch_mean(data, out=mean)
    measuring.torch_vector_norm(data, out=norm)


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
                measuring.torch_sum_into(data, tuple(range(data.dim())), dtype=place[1], out=cell)
            except Exception as error:  # a backend without this out= kernel: summed, then copied
                self.write_out = False
                logger.debug("msprobe: device sums copied, not written in place (%s)", error)
        if not self.write_out:
            measuring.torch_copy(cell, measuring.torch_sum(data, dtype=place[1]))
        item = BatchedSum(self, place, row, cell_index, data)
        self.pending.append(item)
        self.sums += 1
        if cell_index == 0:
            self.sum_rows += 1
        self._added()
        return item

    def measure_stats(self, tensor: torch.Tensor) -> BatchedStats:
        """The reductions of ``tensor`` into the next row of its buffer, read back with the batch."""
        held = data = tensor.detach()
        if data.dtype not in measuring.MEASURED_AS_IS:
            data = data.float()  # a temporary: the batch holds the tensor itself, never this copy (bf16: 2x)
        place = (data.device, data.dtype)
        cells, row = self._next_row(place)
        if self.write_out:
            try:
                reduce_into(data, cells[row])
            except Exception as error:  # a backend without these out= kernels: stacked and copied instead
                self.write_out = False
                logger.debug("msprobe: device statistics stacked, not written in place (%s)", error)
        if not self.write_out:
            low, high = measuring.torch_aminmax(data)
            measuring.torch_copy(
                self.buffers[place][row],
                torch.stack((high, low, measuring.torch_mean(data), measuring.torch_vector_norm(data))),
            )
        stats = BatchedStats(self, place, row, held)
        self.pending.append(stats)
        self._added()
        return stats

    def measure(self, tensor: torch.Tensor) -> dict[str, Any]:
        """``measure_stats`` as a summary's four values."""
        return self.measure_stats(tensor).pending()

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
                blob = host_bytes((torch.cat(parts) if len(parts) > 1 else parts[0]).cpu())  # one alone: no copy
                self.reads += 1
                offset = 0
                for item in group:
                    size = item.data.numel() * item.data.element_size()
                    item.text = checksum_hex(blob[offset : offset + size])
                    offset += size
            except Exception:  # one odd tensor: each is read alone rather than all lost
                for item in group:
                    item.text = measuring.crc32_hex(item.data)
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


def plain_device_tensor(tensor: torch.Tensor) -> bool:
    """What the batch measures: a plain dense tensor with elements, not bool or complex (rare and cheap), and
    one whose values can still be read after the call: not inside a torch.func transform (its wrappers are
    gone by then), not an inference tensor, not meta."""
    return (
        type(tensor) in measuring.PLAIN_TYPES
        and tensor.layout == torch.strided
        and tensor.dim() > 0
        and tensor.dtype != torch.bool
        and not tensor.is_complex()
        and not tensor.is_meta
        and tensor.numel() > 0
        and not tensor.is_inference()
        and not func_transforms.wrapped(tensor)
    )


def summable_later(tensor: torch.Tensor) -> bool:
    """What the overflow screen's sum can wait for: as the batch's statistics, and a tensor of one element (an
    optimizer's step count, a loss), which a sum reads as well as any."""
    return (
        type(tensor) in measuring.PLAIN_TYPES
        and tensor.layout == torch.strided
        and not tensor.is_meta
        and tensor.numel() > 0
        and not tensor.is_inference()
        and not func_transforms.wrapped(tensor)
    )


SCREENED_BY_SUM = (torch.float32, torch.float16, torch.bfloat16, torch.float64)


class StatsAndFlag:
    """The token's value in a waiting summary written whole (fast_path.waiting_summaries): the four
    statistics, ``requires_grad``, and the extremes, in the order of the summary's keys."""

    __slots__ = ("flag", "stats")

    def __init__(self, stats: BatchedStats, flag: bool):
        self.stats, self.flag = stats, flag

    def json_text(self) -> str:
        four, extremes = self.stats.members()
        return f'{four},"requires_grad":{"true" if self.flag else "false"}{extremes}'

    def resolve(self) -> RawJSON:
        return RawJSON(self.json_text())


def summary_rest(stats: BatchedStats, requires_grad: bool) -> str:
    """A waiting summary's text from its statistics to its end (see fast_path.waiting_summaries): a token for them
    until the batch is read back, their text after."""
    values = StatsAndFlag(stats, requires_grad)
    return (PLACEHOLDERS.token(values) if stats.values is None else values.json_text()) + "}"


class _FlagThenExtremes:
    """A waiting summary's ``requires_grad`` and, after it, the ``*_except_inf_nan`` pair its read-back may add:
    the place where the direct path's summary has them."""

    __slots__ = ("flag", "stats")

    def __init__(self, flag: bool, stats: BatchedStats):
        self.flag, self.stats = flag, stats

    def resolve(self) -> RawJSON:
        return RawJSON(("true" if self.flag else "false") + self.extremes().text)

    def extremes(self) -> RawJSON:
        """The pair as members to follow ``requires_grad`` (none for finite extremes), read back if need be."""
        return RawJSON(self.stats.members()[1])


class _ExtremesAfterFlag:
    """The token's value after a waiting ``requires_grad``: its extremes alone (see ``_FlagThenExtremes``)."""

    __slots__ = ("owner",)

    def __init__(self, owner: _FlagThenExtremes):
        self.owner = owner

    def resolve(self) -> RawJSON:
        return self.owner.extremes()


def _waiting_summaries(value: Any, depth: int = 0, undo: bool = False) -> None:
    """Give each summary in ``value`` whose statistics wait in a batch its place for the extremes (in place);
    ``undo``: give them back their plain ``requires_grad`` and read their batches back (the dicts get the
    extremes then)."""
    if isinstance(value, dict):
        first = value.get("Max")
        if isinstance(first, PendingStat) and isinstance(first.stats, BatchedStats):
            flag = value.get("requires_grad")
            if undo:
                if isinstance(flag, _FlagThenExtremes):
                    value["requires_grad"] = flag.flag
                if first.stats.values is None:  # read now: its extremes' keys, added to this dict at read-back,
                    first.stats.batch.read_back()  # would be missed by an encoder already going through the dict
            elif first.stats.values is None and "requires_grad" in value:
                value["requires_grad"] = _FlagThenExtremes(flag, first.stats)
            return
        children = value.values()
    elif isinstance(value, (list, tuple)):
        children = value
    else:
        return
    if depth < 32:  # as deep as the encoder goes
        for child in children:
            _waiting_summaries(child, depth + 1, undo)


def _tokens_for_waiting(made: list[str]) -> Callable[[Any], Any]:
    """orjson's ``default`` for an entry written before its batch is read: a value still on the device becomes
    a token (msprobe.core.dump.pending_values), listed in ``made``; anything else as the writer encodes it."""

    def token(value: Any) -> str:
        made.append(PLACEHOLDERS.token(value))
        return made[-1]

    def default(value: Any) -> Any:
        if isinstance(value, PendingStat):
            if isinstance(value.stats, BatchedStats) and value.stats.values is None:
                return orjson.Fragment(token(value))
        elif isinstance(value, _FlagThenExtremes):
            if value.stats.values is None:
                return orjson.Fragment(("true" if value.flag else "false") + token(_ExtremesAfterFlag(value)))
            return value.resolve()
        elif isinstance(value, BatchedChecksum) and value.text is None and value.data is not None:
            return orjson.Fragment(token(value))
        return for_orjson(value)

    return default


def waiting_json(value: Any) -> str:
    """An entry's value as JSON text now, with a token for each statistic or checksum still on a device (the
    per-call path in C writes the entry, which waits in the writer for its batch's read-back)."""
    _waiting_summaries(value)
    made: list[str] = []
    try:
        return orjson.dumps(value, default=_tokens_for_waiting(made)).decode()
    except TypeError:  # what orjson refuses (an integer beyond 64 bits): encoded as the writer does, values read
        PLACEHOLDERS.drop("".join(made))  # the tokens of the text given up
        _waiting_summaries(value, undo=True)
        return encode_json(value)
