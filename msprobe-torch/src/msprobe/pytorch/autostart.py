"""``msprobe run`` in a PyTorch process: a dump of a script nobody edited.

Each dump step runs from the first call of a module (the model's forward) to the next ``optimizer.step()``,
seen through torch's global optimizer hooks; the dump ends when the process exits. Until a module is called
nothing is hooked, so torchrun's launcher and processes that never run a model write nothing, and the step
after the last ``optimizer.step()`` leaves no empty folder behind. The flow is core's
(:mod:`msprobe.core.autostart.starter`); this module names torch's module class and optimizer hooks.
"""

from __future__ import annotations

import atexit
import logging
from typing import Any

import torch
from torch.optim.optimizer import register_optimizer_step_pre_hook

from msprobe.core.autostart.starter import AutoDump

logger = logging.getLogger("msprobe")

_started: TorchAutoDump | None = None


def begin(config_path: str) -> None:
    """Called once torch is imported, in every process of the job."""
    global _started
    if _started is None:
        _started = TorchAutoDump(config_path)
        _started.arm()
        atexit.register(_started.say_if_nothing_ran)


class TorchAutoDump(AutoDump):
    module_class = torch.nn.Module
    module_words = "torch.nn.Module"
    docs_page = "docs/dump_pytorch.md"
    launcher_modules = ("torch.distributed.run", "torch.distributed.elastic.agent")

    def __init__(self, config_path: str):
        super().__init__(config_path)
        self._stepping_optimizer: int | None = None  # id() of the first optimizer that stepped
        self._told_of_other_optimizers = False

    def debugger_class(self) -> Any:
        from msprobe.pytorch.debugger import PrecisionDebugger

        return PrecisionDebugger

    def in_a_loader_worker(self) -> bool:
        return torch.utils.data.get_worker_info() is not None

    def watch_optimizers(self) -> None:
        register_optimizer_step_pre_hook(self.before_optimizer_step)

    def before_optimizer_step(self, optimizer: torch.optim.Optimizer, args: Any, kwargs: Any) -> None:
        """The first optimizer that steps (the only one, in most scripts) ends each dump step.

        Its own post hook does, not a global one: the dump's hooks come out at the step's end, and torch
        iterates its global hooks while they run, so taking one out there would raise in the user's step().
        """
        if self.given_up:
            return
        if self._stepping_optimizer is None:
            self._stepping_optimizer = id(optimizer)
            optimizer.register_step_post_hook(self.after_optimizer_step)
        elif id(optimizer) != self._stepping_optimizer and not self._told_of_other_optimizers:
            self._told_of_other_optimizers = True
            logger.warning(
                "msprobe: the script steps more than one optimizer; msprobe run ends each dump step at the step() "
                "of the first that stepped, so the others' updates fall in the dump step after it (to set the "
                "steps yourself, call debugger.start() and debugger.step() in the script: docs/dump_pytorch.md)"
            )

    def after_optimizer_step(self, optimizer: torch.optim.Optimizer, args: Any, kwargs: Any) -> None:
        self.end_step()
