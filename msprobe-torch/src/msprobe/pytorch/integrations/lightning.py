"""A dump of a PyTorch Lightning run, whose training loop the user does not write.

``Trainer(..., callbacks=[DumpCallback("config.json")])``: each optimizer step is one dump step, gradient
accumulation included, as ``start()``/``stop()``/``step()`` around a hand-written step would make it. Works
with the ``lightning`` package and with the older ``pytorch_lightning``, whichever is installed (``lightning``
first, when both are).
"""

from __future__ import annotations

from typing import Any

from msprobe.pytorch.debugger import PrecisionDebugger

try:
    from lightning.pytorch.callbacks import Callback
except ImportError:  # the older distribution's name
    from pytorch_lightning.callbacks import Callback


class DumpCallback(Callback):
    """Starts the debugger when a training batch begins and ends the dump step once the optimizer stepped.

    ``config_path`` and the keyword arguments are ``PrecisionDebugger``'s. The model is the LightningModule,
    given at the first batch, so levels L0 and mix work without passing it.
    """

    def __init__(self, config_path: str | None = None, **debugger_options: Any):
        self.debugger = PrecisionDebugger(config_path=config_path, **debugger_options)

    def on_train_batch_start(self, trainer: Any, pl_module: Any, batch: Any, batch_idx: int) -> None:
        self.debugger.start(model=pl_module)

    def on_train_batch_end(self, trainer: Any, pl_module: Any, outputs: Any, batch: Any, batch_idx: int) -> None:
        self.debugger.stop()
        accumulated = (batch_idx + 1) % max(1, int(trainer.accumulate_grad_batches)) == 0
        if accumulated or trainer.is_last_batch:  # the optimizer stepped in this batch: the dump step ends
            self.debugger.step()

    def on_train_end(self, trainer: Any, pl_module: Any) -> None:
        self.debugger.finish()
