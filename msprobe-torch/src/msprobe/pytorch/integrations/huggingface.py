"""A dump of a HuggingFace ``Trainer`` run, whose training loop the user does not write.

``Trainer(..., callbacks=[DumpCallback("config.json")])``: each optimizer step is one dump step, as
``start()``/``stop()``/``step()`` around a hand-written step would make it. Needs ``transformers``
(``pip install 'msprobe-torch[huggingface]'``).
"""

from __future__ import annotations

from typing import Any

from transformers import TrainerCallback

from msprobe.pytorch.debugger import PrecisionDebugger


class DumpCallback(TrainerCallback):
    """Starts the debugger when a training step begins and ends the dump step when it ends.

    ``config_path`` and the keyword arguments are ``PrecisionDebugger``'s. The model is the Trainer's, given
    at the first step, so levels L0 and mix work without passing it.
    """

    def __init__(self, config_path: str | None = None, **debugger_options: Any):
        self.debugger = PrecisionDebugger(config_path=config_path, **debugger_options)

    def on_step_begin(self, args: Any, state: Any, control: Any, model: Any = None, **kwargs: Any) -> None:
        self.debugger.start(model=model)

    def on_step_end(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        self.debugger.stop()
        self.debugger.step()

    def on_train_end(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        self.debugger.finish()
