"""Helpers kept at the reference's import path (``msprobe.mindspore.common.utils``)."""

from __future__ import annotations

from typing import Any

from mindspore.train import Callback


class MsprobeStep(Callback):
    """``Model.train`` callback: start before each step, stop and advance after it."""

    def __init__(self, debugger: Any):
        super().__init__()
        self.debugger = debugger

    def on_train_step_begin(self, run_context: Any) -> None:
        self.debugger.start()

    def on_train_step_end(self, run_context: Any) -> None:
        self.debugger.stop()
        self.debugger.step()
