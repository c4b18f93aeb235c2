"""Make the PyTorch side of the MindSpore-vs-PyTorch compare test (run from the repository root).

    python tests/data/cross_framework/make_pytorch_dump.py

Writes weights.npz and input.npy (shared with the MindSpore test) and a
statistics dump (L0, forward) of the same network in PyTorch to
pytorch_dump/step0/rank/.
"""

from pathlib import Path

import numpy as np
import torch
from torch import nn

from msprobe.pytorch import PrecisionDebugger

HERE = Path(__file__).parent


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(6, 8)
        self.norm = nn.LayerNorm(8)
        self.head = nn.Linear(8, 3)

    def forward(self, x):
        return self.head(torch.relu(self.norm(self.fc(x))))


def main() -> None:
    rng = np.random.default_rng(7)
    weights = {
        "fc.weight": rng.standard_normal((8, 6)).astype(np.float32) * 0.5,
        "fc.bias": rng.standard_normal(8).astype(np.float32) * 0.1,
        "head.weight": rng.standard_normal((3, 8)).astype(np.float32) * 0.5,
        "head.bias": rng.standard_normal(3).astype(np.float32) * 0.1,
    }
    x = rng.standard_normal((4, 6)).astype(np.float32)
    np.savez(HERE / "weights.npz", **weights)
    np.save(HERE / "input.npy", x)
    net = Net()
    with torch.no_grad():
        for name, value in weights.items():
            dict(net.named_parameters())[name].copy_(torch.from_numpy(value))
    debugger = PrecisionDebugger(task="statistics", level="L0", dump_path=str(HERE / "pytorch_dump"), model=net)
    debugger.start()
    with torch.no_grad():
        net(torch.from_numpy(x))
    debugger.stop()
    debugger.step()


if __name__ == "__main__":
    main()
