"""Grad probe on MindSpore: ``PrecisionDebugger.grad_probe(optimizer)`` (the reference's ``monitor``).

The gradients are those the optimizer receives (its forward pre-hook sees
them), one step per optimizer call, as the reference counts steps.
"""

from __future__ import annotations

import logging
from typing import Any

from msprobe.core.api_patch import unrecorded
from msprobe.core.grad_probe import GradProbeHooks, GradSummaryWriter, measure_array
from msprobe.core.recording.session import TaskSession
from msprobe.mindspore.dump.tensors import to_numpy

logger = logging.getLogger(__name__)


class GradProbe(GradProbeHooks):
    def __init__(self, session: TaskSession, optimizer: Any):
        self.session = session
        section = session.config.grad_probe
        self.level = section.grad_level
        self.bounds = section.bounds
        self.wanted = section.param_list
        self.writer = GradSummaryWriter(session.config.dump_path, self.level, self.bounds)
        self.optimizer = optimizer
        self.names = [parameter.name for parameter in optimizer.parameters]
        self.step = 0
        self.handle: Any = None

    def install(self) -> None:
        if self.handle is None:
            self.handle = self.optimizer.register_forward_pre_hook(self._on_optimizer_step)

    def remove(self) -> None:
        if self.handle is not None:
            self.handle.remove()
            self.handle = None

    def _on_optimizer_step(self, _cell: Any, args: tuple) -> None:
        step = self.step
        self.step += 1
        rank = self.session.rank or 0
        if not self.session.selects(step, rank) or not args:
            return
        try:
            with unrecorded():  # a dump running beside the probe does not record its reads (astype of bfloat16)
                records = [
                    measure_array(name, to_numpy(grad), self.level, self.bounds)
                    for name, grad in zip(self.names, args[0])
                    if grad is not None and self.watched(name)
                ]
            self.writer.write_step(step, rank, records)
        except Exception as exc:  # never break training
            if self.session.config.strict:
                raise
            logger.warning("msprobe grad probe: step %d was not recorded (%s: %s)", step, type(exc).__name__, exc)
