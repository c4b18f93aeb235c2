"""The tutorial's script (docs/tutorial.md): two runs of a small model that differ in one call, dumped and
compared. Runs on CPU in well under a minute."""

import json

import torch
import torch.nn.functional as F
from torch import nn

from msprobe.pytorch import PrecisionDebugger, seed_all


class TinyNet(nn.Module):
    def __init__(self, gelu: bool):
        super().__init__()
        self.fc1 = nn.Linear(16, 32)
        self.fc2 = nn.Linear(32, 4)
        self.gelu = gelu

    def forward(self, x):
        hidden = self.fc1(x)
        hidden = F.gelu(hidden) if self.gelu else F.relu(hidden)  # run B's one change
        return self.fc2(hidden)


def train(dump_path: str, gelu: bool) -> None:
    seed_all(1234, mode=True)  # the same weights and data in both runs
    model = TinyNet(gelu)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    debugger = PrecisionDebugger(task="statistics", level="L1", dump_path=dump_path, step=[0])
    for _ in range(2):
        debugger.start()
        x, y = torch.randn(8, 16), torch.randint(0, 4, (8,))
        F.cross_entropy(model(x), y).backward()
        optimizer.step()
        optimizer.zero_grad()
        debugger.stop()
        debugger.step()


train("run_a", gelu=False)
train("run_b", gelu=True)
with open("compare.json", "w") as handle:  # for msprobe compare: the two dump.json files
    json.dump({"npu_path": "run_b/step0/rank/dump.json", "bench_path": "run_a/step0/rank/dump.json"}, handle)
with open("graph.json", "w") as handle:  # for msprobe graph: the two dump folders
    json.dump({"npu_path": "run_b/step0/rank", "bench_path": "run_a/step0/rank"}, handle)
