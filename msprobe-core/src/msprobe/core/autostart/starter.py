"""What ``msprobe run`` does inside each process, for any framework: wait for the first call of a model, start
the debugger there, end the dump step when the optimizer has stepped, and say why at exit if nothing ran.

A backend names its module class (``torch.nn.Module``, ``mindspore.nn.Cell``), its debugger, and how it
learns that an optimizer stepped; this class holds the rest, so both backends start and give up alike.
"""

from __future__ import annotations

import logging
import sys
from typing import Any

from msprobe.core.errors import UsageError

logger = logging.getLogger("msprobe")


class AutoDump:
    """Starts the debugger at a module's first call; the backend calls :meth:`end_step` after the optimizer."""

    #: the framework's module class, whose ``__call__`` is wrapped while waiting for a step to begin
    module_class: Any = None
    #: the module class as the user knows it, and the page on starting the debugger in the script: for the
    #: message of a process that called no module
    module_words = "module"
    docs_page = "docs/dump_pytorch.md"
    #: modules of a launcher process (torchrun's, msrun's), which starts the workers and runs no model
    launcher_modules: tuple[str, ...] = ()

    def __init__(self, config_path: str):
        self.config_path = config_path
        self.debugger: Any = None
        self._plain_call: Any = None  # module_class.__call__ while armed
        self._given_up = False

    # -- what a backend gives ------------------------------------------------------------------------------
    def debugger_class(self) -> Any:
        raise NotImplementedError

    def watch_optimizers(self) -> None:
        """Called once, when the dump begins: arrange for :meth:`end_step` to run after each optimizer step."""
        raise NotImplementedError

    def in_a_loader_worker(self) -> bool:
        """A data loader's worker, forked while armed: it writes nothing."""
        return False

    # -- the flow ------------------------------------------------------------------------------------------
    def arm(self) -> None:
        """Wait for the next call of any module: ``__call__`` is wrapped until then, and only then."""
        if self._plain_call is not None or self._given_up:
            return
        plain_call = self.module_class.__call__
        auto = self

        def first_call(module: Any, *args: Any, **kwargs: Any) -> Any:
            auto.disarm()
            auto.begin_step(module)
            return plain_call(module, *args, **kwargs)

        self._plain_call = plain_call
        self.module_class.__call__ = first_call

    def disarm(self) -> None:
        if self._plain_call is not None:
            self.module_class.__call__ = self._plain_call
            self._plain_call = None

    def begin_step(self, module: Any) -> None:
        if self.in_a_loader_worker():
            self._given_up = True
            return
        try:
            if self.debugger is None:
                if not self._dumps_here():
                    self._given_up = True
                    return
                from msprobe.core.autostart import mark_dumping, place_of_this_program
                from msprobe.core.config import load_config

                place, words = place_of_this_program(load_config(self.config_path).dump_path, sys.argv[0] or "")
                if words:
                    logger.warning("msprobe: %s", words)
                self.debugger = self.debugger_class()(config_path=self.config_path, dump_path=str(place))
                mark_dumping()
                self.watch_optimizers()
                logger.info("msprobe: msprobe run dumps %s from its first call", type(module).__name__)
                self.debugger.start(model=module)
            elif type(self.debugger).current() is not self.debugger:
                self._give_up(UsageError("the script made a PrecisionDebugger of its own; it has the dump now"))
            else:
                self.debugger.start()
        except Exception as exc:  # the training goes on without the dump
            self._give_up(exc)

    @property
    def given_up(self) -> bool:
        return self._given_up

    def end_step(self) -> None:
        """The optimizer has stepped: the dump step ends, and the next module call begins another."""
        if self._given_up or self.debugger is None:
            return
        try:
            self.debugger.step()
        except Exception as exc:
            self._give_up(exc)
            return
        self.arm()

    def say_if_nothing_ran(self) -> None:
        """At the process's end: a process that called no module dumped nothing, and is told why (not a
        launcher, whose workers do the training)."""
        if self.debugger is not None or self._given_up or any(name in sys.modules for name in self.launcher_modules):
            return
        logger.warning(
            "msprobe: msprobe run dumped nothing in this process: no %s was called, and a dump step starts at "
            "a module's first call (to dump calls outside any module, start the debugger in the script: %s)",
            self.module_words, self.docs_page,
        )  # fmt: skip

    def _dumps_here(self) -> bool:
        """Not where the script made a debugger of its own, nor in a helper a dumping process started."""
        from msprobe.core.autostart import helper_of_a_dumping_process

        parent = helper_of_a_dumping_process()
        if parent is not None:
            logger.debug("msprobe: a helper of process %d, which dumps: this process writes nothing", parent)
            return False
        if self.debugger_class().current() is not None:
            logger.warning("msprobe: the script makes its own PrecisionDebugger; msprobe run leaves the dump to it")
            return False
        return True

    def _give_up(self, exc: Exception) -> None:
        self._given_up = True
        self.disarm()
        if getattr(self.debugger, "config", None) is not None and self.debugger.config.strict:
            raise exc
        logger.error("msprobe: msprobe run stops dumping in this process: %s: %s", type(exc).__name__, exc)
