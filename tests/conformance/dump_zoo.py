"""Dump one zoo model for two AdamW steps with whichever msprobe this Python has.

The same script runs under our environment and under the reference tool's
(mindstudio-probe 1.2.2): both answer to ``from msprobe.pytorch import
PrecisionDebugger``. Usage: ``python dump_zoo.py MODEL TASK LEVEL OUT [--float16]``.
``--float16`` makes the model and its inputs float16 and scales the first
layer up, so its outputs pass float16's range from finite inputs (the
overflow check's case).
"""

from __future__ import annotations

import inspect
import json
import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
from zoo import ZOO


def _config(task: str, level: str, out: Path) -> dict:
    section = {"scope": [], "list": [], "data_mode": ["all"]}
    config = {"task": task, "dump_path": str(out), "rank": [], "step": [], "level": level}
    if task in ("statistics", "md5"):
        config["task"] = "statistics"
        config["statistics"] = {**section, "summary_mode": "md5" if task == "md5" else "statistics"}
    elif task == "tensor":
        config["tensor"] = {**section, "file_format": "npy"}
    elif task == "overflow_check":
        config["overflow_check"] = {"overflow_nums": -1}
    return config


def main(model_name: str, task: str, level: str, out: str, float16: bool = False) -> None:
    from msprobe.pytorch import PrecisionDebugger

    torch.manual_seed(1234)
    torch.set_num_threads(1)
    model, batch, loss_of = ZOO[model_name]()
    if float16:  # the first layer's weights scaled up: its outputs pass float16's range while its inputs do not
        model = model.half()
        with torch.no_grad():
            next(model.parameters()).mul_(50)
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3, eps=1e-4 if float16 else 1e-8)
    out_dir = Path(out)
    out_dir.mkdir(parents=True, exist_ok=True)
    config_path = out_dir / "config.json"
    config_path.write_text(json.dumps(_config(task, level, out_dir / "dump")))
    takes_model = "model" in inspect.signature(PrecisionDebugger.__init__).parameters  # 26.x: start(model) only
    debugger = PrecisionDebugger(config_path=str(config_path), **({"model": model} if takes_model else {}))
    for step in range(2):
        inputs = batch(step)
        if float16 and isinstance(inputs, tuple) and inputs[0].is_floating_point():
            inputs = (inputs[0].half() * 1000, inputs[1])
        if takes_model:
            debugger.start()
        else:
            debugger.start(model=model)
        loss = loss_of(model, inputs)
        loss.backward()
        optimizer.step()
        optimizer.zero_grad()
        debugger.stop()
        debugger.step()


if __name__ == "__main__":
    arguments = [a for a in sys.argv[1:] if not a.startswith("--")]
    main(*arguments, float16="--float16" in sys.argv)
