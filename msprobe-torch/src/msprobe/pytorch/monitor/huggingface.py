"""TrainerMon in a HuggingFace ``Trainer``: the Trainer builds the optimizer, so the monitor attaches at train start."""

from __future__ import annotations

from typing import Any

from transformers import TrainerCallback

from msprobe.pytorch.monitor import TrainerMon


class MonitorCallback(TrainerCallback):
    """``Trainer(..., callbacks=[MonitorCallback("monitor.json")])``: monitors the whole ``train()``."""

    def __init__(self, config_file_path: str, params_have_main_grad: bool = False):
        self.monitor = TrainerMon(config_file_path, params_have_main_grad=params_have_main_grad)

    def on_train_begin(self, args: Any, state: Any, control: Any, model: Any = None, optimizer: Any = None, **kwargs):
        # Accelerate wraps the optimizer; the step hooks see the torch optimizer inside.
        inner = getattr(optimizer, "optimizer", optimizer)
        self.monitor.set_monitor(
            model,
            grad_acc_steps=args.gradient_accumulation_steps,
            optimizer=inner,
            start_iteration=state.global_step,
        )

    def on_train_end(self, args: Any, state: Any, control: Any, **kwargs):
        self.monitor.finish()
