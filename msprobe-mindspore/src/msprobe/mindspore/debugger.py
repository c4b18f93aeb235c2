"""``msprobe.mindspore.PrecisionDebugger``: the core lifecycle plus what needs MindSpore."""

from __future__ import annotations

from typing import Any

from msprobe.core.session import BaseDebugger


def distributed_rank() -> int | None:
    """The communication rank, or None when MindSpore's communication is not initialised."""
    try:
        from mindspore.communication import get_rank
        from mindspore.communication.management import is_initialized

        return int(get_rank()) if is_initialized() else None
    except Exception:  # no communication package: a single-device run
        return None


class PrecisionDebugger(BaseDebugger):
    framework = "mindspore"

    def current_rank(self) -> int | None:
        return distributed_rank()

    def is_model(self, obj: Any) -> bool:
        from mindspore import nn

        return isinstance(obj, nn.Cell)

    def monitor(self, optimizer: Any) -> None:
        """Grad probe (task grad_probe): record the gradients the optimizer receives at each step."""
        from mindspore import nn
        from msprobe.core.errors import UsageError
        from msprobe.mindspore.grad_probe import GradProbe

        if self.config.task != "grad_probe":
            raise UsageError("monitor() needs task 'grad_probe' in the config")
        if not isinstance(optimizer, nn.Optimizer):
            raise UsageError(f"monitor() takes the mindspore.nn.Optimizer to watch, got {type(optimizer).__name__}")
        if self._hooks is not None:
            self._hooks.remove()
        self._hooks = GradProbe(self.session, optimizer)
        self._hooks.install()
