"""Dump one zoo model for two AdamW steps with whichever msprobe this Python has.

The same script runs under our environment and under the reference tool's
(mindstudio-probe 1.2.2): both answer to ``from msprobe.pytorch import
PrecisionDebugger``. Usage: ``python dump_zoo.py MODEL TASK LEVEL OUT [--float16]``.
Each step's training loss goes to ``OUT/losses.json``. TASK ``untouched``
runs with no tool at all, its dropout built as 0 (what ``seed_all`` promises),
and writes the CRC-32 of each linear layer's output, in call order, to
``OUT/crcs.json``: the values a tool that changes nothing must report.
``--float16`` makes the model and its inputs float16 and scales the first
layer up, so its outputs pass float16's range from finite inputs (the
overflow check's case).
"""

from __future__ import annotations

import inspect
import json
import sys
import zlib
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
from zoo import SEEDED, ZOO

SEED = 1234


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


def _crc(tensor: torch.Tensor) -> str:
    return f"{zlib.crc32(tensor.detach().contiguous().numpy().tobytes()):08x}"


def _record_linear_outputs(model: torch.nn.Module, crcs: list[list[list[str]]]) -> None:
    """Plain forward hooks (no backward hooks, nothing returned): they see the outputs and change nothing.
    ``crcs[step]`` gets [layer type, CRC] per call."""
    for module in model.modules():
        kind = type(module).__name__
        if kind in ("Linear", "Conv1D"):
            module.register_forward_hook(lambda _m, _a, output, kind=kind: crcs[-1].append([kind, _crc(output)]))


class _NoTool:
    def start(self, **_: object) -> None: ...
    def stop(self) -> None: ...
    def step(self) -> None: ...


def main(model_name: str, task: str, level: str, out: str, float16: bool = False) -> None:
    untouched = task == "untouched"
    torch.manual_seed(SEED)
    torch.set_num_threads(1)
    if model_name in SEEDED and not untouched:
        from msprobe.pytorch import seed_all

        seed_all(SEED)
    model, batch, loss_of = ZOO[model_name](**({"dropout": 0.0} if untouched else {}))
    if float16:  # the first layer's weights scaled up: its outputs pass float16's range while its inputs do not
        model = model.half()
        with torch.no_grad():
            next(model.parameters()).mul_(50)
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3, eps=1e-4 if float16 else 1e-8)
    out_dir = Path(out)
    out_dir.mkdir(parents=True, exist_ok=True)
    crcs: list[list[list[str]]] = []
    if untouched:
        _record_linear_outputs(model, crcs)
        debugger, takes_model = _NoTool(), False
    else:
        from msprobe.pytorch import PrecisionDebugger

        config_path = out_dir / "config.json"
        config_path.write_text(json.dumps(_config(task, level, out_dir / "dump")))
        takes_model = "model" in inspect.signature(PrecisionDebugger.__init__).parameters  # 26.x: start(model) only
        debugger = PrecisionDebugger(config_path=str(config_path), **({"model": model} if takes_model else {}))
    losses = []
    for step in range(2):
        inputs = batch(step)
        crcs.append([])
        if float16 and isinstance(inputs, tuple) and inputs[0].is_floating_point():
            inputs = (inputs[0].half() * 1000, inputs[1])
        if takes_model:
            debugger.start()
        else:
            debugger.start(model=model)
        loss = loss_of(model, inputs)
        losses.append(loss.item())
        loss.backward()
        optimizer.step()
        optimizer.zero_grad()
        debugger.stop()
        debugger.step()
    (out_dir / "losses.json").write_text(json.dumps(losses))
    if untouched:
        (out_dir / "crcs.json").write_text(json.dumps(crcs))


if __name__ == "__main__":
    arguments = [a for a in sys.argv[1:] if not a.startswith("--")]
    main(*arguments, float16="--float16" in sys.argv)
