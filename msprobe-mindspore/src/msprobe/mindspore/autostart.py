"""``msprobe run`` in a MindSpore process: a dump of a script nobody edited.

Each dump step runs from the first call of a Cell (the network's forward) to the end of the next call of an
optimizer (``optimizer(grads)``; a ``mindspore.nn.Optimizer`` is a Cell too, and its call is the update);
the dump ends when the process exits. The flow is core's (:mod:`msprobe.core.autostart.starter`).
"""

from __future__ import annotations

import atexit
import logging
from typing import Any

from mindspore import nn
from msprobe.core.autostart.starter import AutoDump

logger = logging.getLogger("msprobe")

_started: MindSporeAutoDump | None = None


def begin(config_path: str) -> None:
    """Called once mindspore is imported, in every process of the job."""
    global _started
    if _started is None:
        _started = MindSporeAutoDump(config_path)
        _started.arm()
        atexit.register(_started.say_if_nothing_ran)


class MindSporeAutoDump(AutoDump):
    module_class = nn.Cell
    module_words = "mindspore.nn.Cell"
    docs_page = "docs/mindspore.md"
    launcher_modules = ("mindspore.parallel.cluster.run",)  # msrun

    def __init__(self, config_path: str):
        super().__init__(config_path)
        self._stepping_optimizer: int | None = None
        self._told_of_other_optimizers = False
        self._inside_an_optimizer = 0

    def debugger_class(self) -> Any:
        from msprobe.mindspore.debugger import PrecisionDebugger

        return PrecisionDebugger

    def watch_optimizers(self) -> None:
        """``nn.Optimizer.__call__``, which every optimizer inherits, ends the dump step once it returns."""
        auto = self

        def call_then_end_the_step(optimizer: Any, *args: Any, **kwargs: Any) -> Any:
            auto._inside_an_optimizer += 1
            try:
                return nn.Cell.__call__(optimizer, *args, **kwargs)
            finally:
                auto._inside_an_optimizer -= 1
                if not auto._inside_an_optimizer:
                    auto.after_optimizer_call(optimizer)

        nn.Optimizer.__call__ = call_then_end_the_step

    def after_optimizer_call(self, optimizer: Any) -> None:
        if self.given_up:
            return
        if self._stepping_optimizer is None:
            self._stepping_optimizer = id(optimizer)
        if id(optimizer) == self._stepping_optimizer:
            self.end_step()
        elif not self._told_of_other_optimizers:
            self._told_of_other_optimizers = True
            logger.warning(
                "msprobe: the script calls more than one optimizer; msprobe run ends each dump step after the "
                "call of the first that was called, so the others' updates fall in the dump step after it (to "
                "set the steps yourself, call debugger.start() and debugger.step() in the script: docs/mindspore.md)"
            )
