"""Grad probe on PyTorch: ``PrecisionDebugger.grad_probe(model)`` (the reference's ``monitor(model)``).

Gradients are read when an optimizer is about to apply them (the
reference counts steps as optimizer calls, so a step skipped for a nan loss
is not a step), measured in one pass by the core's C kernels when they lie in
CPU memory, else on the device, where every parameter's numbers, sign bits
(or, at L0, bytes for md5) are joined into one buffer and read back in one
transfer a step (one per ``TRANSFER_BYTES``), and handed to the core's
summary writer.
"""

from __future__ import annotations

import hashlib
import logging
from typing import Any

import numpy as np
import torch

from msprobe.core.api_patch import unrecorded
from msprobe.core.grad_probe import GradProbeHooks, GradRecord, GradSummaryWriter
from msprobe.core.recording.session import TaskSession
from msprobe.pytorch.dump.device_batch import FORCE_DEVICE_PATH
from msprobe.pytorch.dump.measuring import kernel_stats
from msprobe.pytorch.dump.pt_file import host_bytes

logger = logging.getLogger(__name__)

TRANSFER_BYTES = 1 << 30  # at most this much joined on the device for one read back (L0 moves every gradient)
_BIT_WEIGHTS = (128, 64, 32, 16, 8, 4, 2, 1)  # numpy.packbits' order: the first element in the highest bit


def measure(name: str, grad: torch.Tensor, level: str, bounds: torch.Tensor | None) -> GradRecord:
    data = grad.detach()
    if callable(getattr(data, "to_local", None)):  # a DTensor (FSDP2, tensor parallel): this rank's shard
        data = data.to_local()
    values = data.float() if data.dtype != torch.float64 else data
    stats = kernel_stats(values) if level != "L2" else None  # a CPU gradient: one pass in C
    if stats is not None:
        record = GradRecord(name, list(data.shape), stats["Max"], stats["Min"], stats["Norm"])
    else:
        record = _measure_with_torch(name, data, values, level, bounds)
    if level == "L0":
        record.md5 = hashlib.md5(host_bytes(data.cpu())).hexdigest()
    else:
        positive = (values > 0).cpu().numpy()
        record.signs = np.packbits(positive.reshape(-1))
    return record


def _measure_with_torch(
    name: str, data: torch.Tensor, values: torch.Tensor, level: str, bounds: torch.Tensor | None
) -> GradRecord:
    """Where the C kernels cannot read (L2, a 0-d gradient): the numbers in torch, one read."""
    record = GradRecord(name, list(data.shape), 0.0, 0.0, 0.0)
    _fill_numbers(record, _numbers(values, level, bounds).tolist(), level, bounds)
    return record


def _numbers(values: torch.Tensor, level: str, bounds: torch.Tensor | None) -> torch.Tensor:
    """Max, Min, Norm (and at L2 the share of each interval, then of zeros) in ``values``' dtype, as float64."""
    low, high = torch.aminmax(values)
    parts = [high, low, torch.linalg.vector_norm(values)]
    if level == "L2" and bounds is not None:
        counts = torch.bincount(torch.bucketize(values.reshape(-1), bounds), minlength=len(bounds) + 1)
        parts += [*list((counts.to(values.dtype) / values.numel()).unbind()), (values == 0).to(values.dtype).mean()]
    return torch.stack([p.to(values.dtype) for p in parts]).to(torch.float64)


def _fill_numbers(record: GradRecord, numbers: list[float], level: str, bounds: torch.Tensor | None) -> None:
    record.maximum, record.minimum, record.norm = numbers[:3]
    if level == "L2" and bounds is not None:
        record.buckets = numbers[3:-1]
        record.zeros = numbers[-1]


def _packed_signs(values: torch.Tensor, weights: torch.Tensor) -> torch.Tensor:
    """``numpy.packbits(values > 0)``, made where ``values`` lie (``weights``: _BIT_WEIGHTS there)."""
    bits = (values > 0).reshape(-1).to(torch.uint8)
    if bits.numel() % 8:
        bits = torch.cat((bits, bits.new_zeros(8 - bits.numel() % 8)))
    return (bits.view(-1, 8) * weights).sum(dim=1, dtype=torch.uint8)


class _DeviceReads:
    """A step's device gradients, measured where they lie and read back together: each one's numbers (float64)
    and sign bits, or at L0 its bytes for md5, joined into one uint8 buffer, one transfer per TRANSFER_BYTES."""

    def __init__(self, level: str, bounds: torch.Tensor | None, device: torch.device):
        self.level, self.bounds = level, bounds
        self.weights = torch.tensor(_BIT_WEIGHTS, dtype=torch.uint8, device=device)  # copied there once a step
        self.reads = 0
        self._pieces: list[torch.Tensor] = []
        self._waiting: list[tuple[GradRecord, int, int]] = []  # record, bytes of numbers, bytes after them
        self._bytes = 0

    def add(self, name: str, grad: torch.Tensor) -> GradRecord:
        """Queues ``grad``; its record is filled by :meth:`read_back`."""
        data = grad.detach()
        values = data.float() if data.dtype != torch.float64 else data
        numbers = _numbers(values, self.level, self.bounds).view(torch.uint8)
        if self.level == "L0":
            after = data.contiguous().reshape(-1).view(torch.uint8)
        else:
            after = _packed_signs(values, self.weights)
        record = GradRecord(name, list(data.shape), 0.0, 0.0, 0.0)
        self._waiting.append((record, numbers.numel(), after.numel()))
        self._pieces += [numbers, after]
        self._bytes += numbers.numel() + after.numel()
        if self._bytes >= TRANSFER_BYTES:
            self.read_back()
        return record

    def read_back(self) -> None:
        if not self._waiting:
            return
        host = torch.cat(self._pieces).cpu().numpy()
        self.reads += 1
        offset = 0
        for record, numbers_size, after_size in self._waiting:
            numbers = np.frombuffer(host[offset : offset + numbers_size].tobytes(), dtype=np.float64).tolist()
            after = host[offset + numbers_size : offset + numbers_size + after_size]
            offset += numbers_size + after_size
            _fill_numbers(record, numbers, self.level, self.bounds)
            if self.level == "L0":
                record.md5 = hashlib.md5(after.tobytes()).hexdigest()
            else:
                record.signs = after.copy()
        self._pieces, self._waiting, self._bytes = [], [], 0


def _applied_gradient(parameter: torch.Tensor) -> torch.Tensor | None:
    """The gradient the optimizer is about to apply: ``.grad``, or Megatron-style ``main_grad`` where the
    training moved it there and left ``.grad`` empty."""
    if parameter.grad is not None:
        return parameter.grad
    return getattr(parameter, "main_grad", None)


class GradProbe(GradProbeHooks):
    """TaskHooks for task grad_probe: installed by grad_probe(), runs for the whole training."""

    def __init__(self, session: TaskSession, model: torch.nn.Module):
        self.session = session
        section = session.config.grad_probe
        self.level = section.grad_level
        self.wanted = section.param_list
        self.bounds = torch.tensor(section.bounds, dtype=torch.float64) if self.level == "L2" else None
        self._bounds_by_device: dict[torch.device, torch.Tensor] = {}
        self.writer = GradSummaryWriter(session.config.dump_path, self.level, section.bounds)
        self.parameters = [(n, p) for n, p in model.named_parameters() if p.requires_grad and self.watched(n)]
        self.step = 0
        self.host_reads = 0  # the device reads of the last step recorded
        self.handle: Any = None

    def _bounds_on(self, device: torch.device) -> torch.Tensor | None:
        """L2's interval bounds where the gradient lies (copied there once)."""
        if self.bounds is None:
            return None
        if device not in self._bounds_by_device:
            self._bounds_by_device[device] = self.bounds.to(device)
        return self._bounds_by_device[device]

    def install(self) -> None:
        if self.handle is None:
            from torch.optim.optimizer import register_optimizer_step_pre_hook

            self.handle = register_optimizer_step_pre_hook(self._on_optimizer_step)

    def remove(self) -> None:
        if self.handle is not None:
            self.handle.remove()
            self.handle = None

    def _on_optimizer_step(self, optimizer: Any, args: tuple, kwargs: dict) -> None:
        step = self.step
        self.step += 1
        rank = self.session.rank or 0
        if not self.session.selects(step, rank):
            return
        try:
            readers: dict[torch.device, _DeviceReads] = {}  # one per device: its gradients read back together
            records: list[GradRecord] = []  # a device gradient's is filled when its device is read back
            with unrecorded():  # a dump running beside the probe does not record the probe's arithmetic
                for name, parameter in self.parameters:
                    grad = _applied_gradient(parameter)
                    if grad is None:
                        continue
                    bounds = self._bounds_on(grad.device)
                    if grad.is_cpu and not FORCE_DEVICE_PATH:
                        records.append(measure(name, grad, self.level, bounds))
                        continue
                    reads = readers.get(grad.device)
                    if reads is None:
                        reads = readers[grad.device] = _DeviceReads(self.level, bounds, grad.device)
                    records.append(reads.add(name, grad))
                for reads in readers.values():
                    reads.read_back()
            self.host_reads = sum(reads.reads for reads in readers.values())
            self.writer.write_step(step, rank, records)
        except Exception as exc:  # never break training
            if self.session.config.strict:
                raise
            logger.warning("msprobe grad probe: step %d was not recorded (%s: %s)", step, type(exc).__name__, exc)
