"""``msprobe run`` in a PyTorch process: a dump of a script nobody edited.

Each dump step runs from the first call of a module (the model's forward) to the next ``optimizer.step()``,
seen through torch's global optimizer hooks; the dump ends when the process exits. Until a module is called
nothing is hooked, so torchrun's launcher and processes that never run a model write nothing, and the step
after the last ``optimizer.step()`` leaves no empty folder behind.
"""

from __future__ import annotations

import atexit
import logging
import sys
from typing import Any

import torch
from torch.optim.optimizer import register_optimizer_step_pre_hook

from msprobe.core.errors import UsageError

logger = logging.getLogger("msprobe")

_started: AutoDump | None = None


def _launcher() -> bool:
    """torchrun's own process, which starts the workers and runs no model."""
    return any(name in sys.modules for name in ("torch.distributed.run", "torch.distributed.elastic.agent"))


def begin(config_path: str) -> None:
    """Called once torch is imported, in every process of the job."""
    global _started
    if _started is None:
        _started = AutoDump(config_path)
        _started.arm()
        atexit.register(_started.say_if_nothing_ran)


class AutoDump:
    """Starts the debugger at a module's first call and ends the step after the optimizer steps."""

    def __init__(self, config_path: str):
        self.config_path = config_path
        self.debugger: Any = None
        self._stepping_optimizer: int | None = None  # id() of the first optimizer that stepped
        self._plain_call: Any = None  # Module.__call__ while armed
        self._given_up = False

    def arm(self) -> None:
        """Wait for the next call of any module: ``Module.__call__`` is wrapped until then, and only then."""
        if self._plain_call is not None or self._given_up:
            return
        plain_call = torch.nn.Module.__call__
        auto = self

        def first_call(module: torch.nn.Module, *args: Any, **kwargs: Any) -> Any:
            auto.disarm()
            auto.begin_step(module)
            return plain_call(module, *args, **kwargs)

        self._plain_call = plain_call
        torch.nn.Module.__call__ = first_call  # type: ignore[method-assign]

    def disarm(self) -> None:
        if self._plain_call is not None:
            torch.nn.Module.__call__ = self._plain_call  # type: ignore[method-assign]
            self._plain_call = None

    def begin_step(self, module: torch.nn.Module) -> None:
        if torch.utils.data.get_worker_info() is not None:  # a DataLoader worker forked while armed
            self._given_up = True
            return
        try:
            if self.debugger is None:
                if not self._dumps_here():
                    self._given_up = True
                    return
                from msprobe.core.autostart import mark_dumping, place_of_this_program
                from msprobe.core.config import load_config
                from msprobe.pytorch.debugger import PrecisionDebugger

                place, words = place_of_this_program(load_config(self.config_path).dump_path, sys.argv[0] or "")
                if words:
                    logger.warning("msprobe: %s", words)
                self.debugger = PrecisionDebugger(config_path=self.config_path, dump_path=str(place))
                mark_dumping()
                register_optimizer_step_pre_hook(self.before_optimizer_step)
                logger.info("msprobe: msprobe run dumps %s from its first call", type(module).__name__)
                self.debugger.start(model=module)
            elif type(self.debugger).current() is not self.debugger:
                self._give_up(UsageError("the script made a PrecisionDebugger of its own; it has the dump now"))
            else:
                self.debugger.start()
        except Exception as exc:  # the training goes on without the dump
            self._give_up(exc)

    def before_optimizer_step(self, optimizer: torch.optim.Optimizer, args: Any, kwargs: Any) -> None:
        """The first optimizer that steps (the only one, in most scripts) ends each dump step.

        Its own post hook does, not a global one: the dump's hooks come out at the step's end, and torch
        iterates its global hooks while they run, so taking one out there would raise in the user's step().
        """
        if self._stepping_optimizer is None and not self._given_up:
            self._stepping_optimizer = id(optimizer)
            optimizer.register_step_post_hook(self.after_optimizer_step)

    def after_optimizer_step(self, optimizer: torch.optim.Optimizer, args: Any, kwargs: Any) -> None:
        if self._given_up:
            return
        try:
            self.debugger.step()
        except Exception as exc:
            self._give_up(exc)
            return
        self.arm()

    def say_if_nothing_ran(self) -> None:
        """At the process's end: a process that called no module dumped nothing, and is told why (not
        torchrun's launcher, whose workers do the training)."""
        if self.debugger is not None or self._given_up or _launcher():
            return
        logger.warning(
            "msprobe: msprobe run dumped nothing in this process: no torch.nn.Module was called, and a dump "
            "step starts at a module's first call (to dump calls outside any module, start the debugger in the "
            "script: docs/dump_pytorch.md)"
        )

    def _dumps_here(self) -> bool:
        """Not where the script made a debugger of its own, nor in a helper a dumping process started."""
        from msprobe.core.autostart import helper_of_a_dumping_process
        from msprobe.pytorch.debugger import PrecisionDebugger

        parent = helper_of_a_dumping_process()
        if parent is not None:
            logger.debug("msprobe: a helper of process %d, which dumps: this process writes nothing", parent)
            return False
        if PrecisionDebugger.current() is not None:
            logger.warning("msprobe: the script makes its own PrecisionDebugger; msprobe run leaves the dump to it")
            return False
        return True

    def _give_up(self, exc: Exception) -> None:
        self._given_up = True
        self.disarm()
        if getattr(self.debugger, "config", None) is not None and self.debugger.config.strict:
            raise exc
        logger.error("msprobe: msprobe run stops dumping in this process: %s: %s", type(exc).__name__, exc)
