"""msprobe demo: dump a small model twice, compare the runs, print the verdict.

Run A is the reference run. Run B is the same model and data with one
change slipped in: its feed-forward activation is leaky_relu instead of
relu. The compare should name that call as the first suspicious node.

    python examples/demo.py [--out demo_output]
"""

from __future__ import annotations

import argparse
import json
import shutil
from pathlib import Path

import torch
import torch.nn.functional as F
from torch import nn

from msprobe.core.compare.run import compare
from msprobe.core.graph.run import run_graph
from msprobe.pytorch import PrecisionDebugger, seed_all


class Block(nn.Module):
    def __init__(self, width: int = 32, leaky: bool = False):
        super().__init__()
        self.conv = nn.Conv1d(width, width, 3, padding=1)
        self.norm = nn.LayerNorm(width)
        self.attn = nn.MultiheadAttention(width, 4, batch_first=True)
        self.fc1 = nn.Linear(width, 4 * width)
        self.fc2 = nn.Linear(4 * width, width)
        self.dropout = nn.Dropout(0.1)
        self.leaky = leaky
        self.head = nn.Linear(width, 10)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x + self.conv(x.transpose(1, 2)).transpose(1, 2)
        h = self.norm(x)
        x = x + self.attn(h, h, h, need_weights=False)[0]
        hidden = self.fc1(x)
        hidden = F.leaky_relu(hidden, 0.2) if self.leaky else F.relu(hidden)
        x = x + self.fc2(self.dropout(hidden))
        return self.head(x.mean(dim=1))


def run(dump_path: Path, leaky: bool) -> None:
    seed_all(1234, mode=True)
    model = Block(leaky=leaky)
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3)
    debugger = PrecisionDebugger(task="statistics", level="mix", dump_path=str(dump_path), model=model, step=[0])
    for _ in range(2):
        debugger.start()
        x = torch.randn(4, 16, 32)
        y = torch.randint(0, 10, (4,))
        loss = F.cross_entropy(model(x), y)
        loss.backward()
        optimizer.step()
        optimizer.zero_grad()
        debugger.stop()
        debugger.step()
    debugger.finish()  # the files are complete, and msprobe says where they went (else it would at exit)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", default="demo_output", type=Path)
    args = parser.parse_args()
    shutil.rmtree(args.out, ignore_errors=True)
    run(args.out / "run_a", leaky=False)
    run(args.out / "run_b", leaky=True)
    summary = compare(
        {
            "npu_json_path": str(args.out / "run_b/step0/rank/dump.json"),
            "bench_json_path": str(args.out / "run_a/step0/rank/dump.json"),
        },
        args.out / "compare",
    )
    print(summary.diagnosis.text() if summary.diagnosis else "")
    print(summary.line())
    print("result files:", ", ".join(str(path) for path in summary.files))
    spec = args.out / "graph.json"
    spec.write_text(
        json.dumps({"npu_path": str(args.out / "run_b/step0/rank"), "bench_path": str(args.out / "run_a/step0/rank")})
    )
    [graph] = run_graph(spec, args.out / "graph")
    print(f"model tree, coloured by error (open in a browser): {graph.files[1]}")
    found = bool(summary.diagnosis and summary.diagnosis.api == "Functional.leaky_relu.0.forward")
    print("verdict:", "the injected difference was found" if found else "the injected difference was NOT found")
    return 0 if found else 1


if __name__ == "__main__":
    raise SystemExit(main())
