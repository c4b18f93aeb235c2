"""Grad probe on PyTorch: ``PrecisionDebugger.monitor(model)``.

Gradients are read when an optimizer is about to apply them (the
reference counts steps as optimizer calls, so a step skipped for a nan loss
is not a step), measured in one pass by the core's C kernels when they lie in
CPU memory, else on the device with one host transfer per parameter, and
handed to the core's summary writer.
"""

from __future__ import annotations

import hashlib
import logging
from typing import Any

import numpy as np
import torch

from msprobe.core.api_patch import unrecorded
from msprobe.core.grad_probe import GradProbeHooks, GradRecord, GradSummaryWriter
from msprobe.core.session import TaskSession
from msprobe.pytorch.dump.tensors import kernel_stats

logger = logging.getLogger(__name__)


def measure(name: str, grad: torch.Tensor, level: str, bounds: torch.Tensor | None) -> GradRecord:
    data = grad.detach()
    values = data.float() if data.dtype != torch.float64 else data
    stats = kernel_stats(values) if level != "L2" else None  # a CPU gradient: one pass in C
    if stats is not None:
        record = GradRecord(name, list(data.shape), stats["Max"], stats["Min"], stats["Norm"])
    else:
        record = _measure_with_torch(name, data, values, level, bounds)
    if level == "L0":
        record.md5 = hashlib.md5(data.cpu().contiguous().view(torch.uint8).numpy().tobytes()).hexdigest()
    else:
        positive = (values > 0).cpu().numpy()
        record.signs = np.packbits(positive.reshape(-1))
    return record


def _measure_with_torch(
    name: str, data: torch.Tensor, values: torch.Tensor, level: str, bounds: torch.Tensor | None
) -> GradRecord:
    """On the device, one host transfer for all the numbers."""
    low, high = torch.aminmax(values)
    norm = torch.linalg.vector_norm(values)
    record = GradRecord(name, list(data.shape), 0.0, 0.0, 0.0)
    parts = [high, low, norm]
    if level == "L2" and bounds is not None:
        counts = torch.bincount(torch.bucketize(values.reshape(-1), bounds), minlength=len(bounds) + 1)
        parts += [*list((counts.to(values.dtype) / values.numel()).unbind()), (values == 0).to(values.dtype).mean()]
    numbers = torch.stack([p.to(values.dtype) for p in parts]).tolist()
    record.maximum, record.minimum, record.norm = numbers[:3]
    if level == "L2" and bounds is not None:
        record.buckets = numbers[3:-1]
        record.zeros = numbers[-1]
    return record


def _applied_gradient(parameter: torch.Tensor) -> torch.Tensor | None:
    """The gradient the optimizer is about to apply: ``.grad``, or Megatron-style ``main_grad`` where the
    training moved it there and left ``.grad`` empty."""
    if parameter.grad is not None:
        return parameter.grad
    return getattr(parameter, "main_grad", None)


class GradProbe(GradProbeHooks):
    """TaskHooks for task grad_probe: installed by monitor(), runs for the whole training."""

    def __init__(self, session: TaskSession, model: torch.nn.Module):
        self.session = session
        section = session.config.grad_probe
        self.level = section.grad_level
        self.wanted = section.param_list
        self.bounds = torch.tensor(section.bounds, dtype=torch.float64) if self.level == "L2" else None
        self.writer = GradSummaryWriter(session.config.dump_path, self.level, section.bounds)
        self.parameters = [(n, p) for n, p in model.named_parameters() if p.requires_grad and self.watched(n)]
        self.step = 0
        self.handle: Any = None

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
        config = self.session.config
        rank = self.session.rank or 0
        if (config.step and step not in config.step) or (config.rank and rank not in config.rank):
            return
        try:
            bounds = self.bounds
            records = []
            with unrecorded():  # a dump running beside the probe does not record the probe's arithmetic
                for name, parameter in self.parameters:
                    grad = _applied_gradient(parameter)
                    if grad is None:
                        continue
                    if bounds is not None and bounds.device != grad.device:
                        bounds = self.bounds = self.bounds.to(grad.device)
                    records.append(measure(name, grad, self.level, bounds))
            self.writer.write_step(step, rank, records)
        except Exception as exc:  # never break training
            if self.session.config.strict:
                raise
            logger.warning("msprobe grad probe: step %d was not recorded (%s: %s)", step, type(exc).__name__, exc)
