"""Index a weight with a 2-D integer tensor (``w[idx]``, as Whisper's ``weight[position_ids]``), dump it as
tensors at L1 with whichever msprobe this Python has, and save what autograd says the gradients are.

Usage: ``python dump_indexing.py OUT``. Writes ``OUT/dump`` and ``OUT/expected.pt``: the gradient arriving at
the indexed result and the gradient of ``w``.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import torch


def main(out: str) -> None:
    from msprobe.pytorch import PrecisionDebugger

    folder = Path(out)
    folder.mkdir(parents=True, exist_ok=True)
    section = {"scope": [], "list": [], "data_mode": ["all"], "file_format": "npy"}
    config = {"task": "tensor", "dump_path": str(folder / "dump"), "rank": [], "step": [], "level": "L1"}
    (folder / "config.json").write_text(json.dumps({**config, "tensor": section}))
    w = torch.nn.Parameter(torch.arange(24.0).reshape(6, 4))
    weights = torch.arange(24.0).reshape(2, 3, 4) + 1  # a distinct gradient for every position
    index = torch.tensor([[5, 0, 5], [1, 1, 2]])  # rows repeated and left out: w's gradient is no reshaping
    debugger = PrecisionDebugger(config_path=str(folder / "config.json"))
    debugger.start()
    picked = w[index]
    picked.retain_grad()
    (picked * weights).sum().backward()
    debugger.stop()
    debugger.step()
    torch.save({"arriving": picked.grad, "w": w.grad}, folder / "expected.pt")


if __name__ == "__main__":
    main(sys.argv[1])
