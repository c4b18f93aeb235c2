"""Use the tutorial's three plugins once each (docs/plugin_tutorial.md, step 5).

    python examples/plugin-tutorial/try_them.py OUT_DIR

Dumps a tiny model twice with task tensor (the second run with its weights
nudged), compares the runs in tensor and statistics mode, and runs the free
benchmark with the bf16_inputs perturbation. Prints what each plugin added.
"""

from __future__ import annotations

import csv
import json
import sys
from pathlib import Path

import torch

from msprobe.core.compare.run import compare
from msprobe.pytorch import PrecisionDebugger, seed_all


def dump(folder: Path, task: str, nudge: float) -> Path:
    seed_all(7, mode=True)
    model = torch.nn.Sequential(torch.nn.Linear(8, 8), torch.nn.ReLU(), torch.nn.Linear(8, 2))
    with torch.no_grad():
        model[0].weight.mul_(1 + nudge)
    debugger = PrecisionDebugger(task=task, level="L1", dump_path=str(folder), step=[0])
    debugger.start()
    model(torch.randn(4, 8)).sum().backward()
    debugger.stop()
    debugger.step()
    return folder / "step0" / "rank" / "dump.json"


def compare_runs(out: Path, task: str) -> list[dict[str, str]]:
    npu, bench = dump(out / f"{task}_a", task, 0.01), dump(out / f"{task}_b", task, 0.0)
    compare({"npu_path": str(npu), "bench_path": str(bench)}, out / f"{task}_result")
    result = next((out / f"{task}_result").glob("compare_result_*.csv"))
    return list(csv.DictReader(result.open(encoding="utf-8")))


def free_benchmark(out: Path) -> list[dict[str, str]]:
    config = {"task": "free_benchmark", "level": "L1", "dump_path": str(out / "fb"),
              "free_benchmark": {"pert_mode": "bf16_inputs", "list": ["add", "sum"]}}  # fmt: skip
    (out / "fb.json").write_text(json.dumps(config))
    debugger = PrecisionDebugger(config_path=str(out / "fb.json"))
    x = torch.linspace(1.0, 2.0, 64)
    debugger.start()
    (x + 1e-3).sum()  # a sum of 64 values: rounding the inputs to bfloat16 moves it by far more than float32 noise
    debugger.stop()
    debugger.step()
    report = out / "fb" / "free_benchmark.csv"
    return list(csv.DictReader(report.open(encoding="utf-8"))) if report.exists() else []


def main() -> None:
    out = Path(sys.argv[1] if len(sys.argv) > 1 else "plugin_tutorial_output")
    tensor_rows = compare_runs(out, "tensor")
    statistics_rows = compare_runs(out, "statistics")
    fragile = free_benchmark(out)
    summary = {
        "RelL2Err": {row["NPU Name"]: row["RelL2Err"] for row in tensor_rows},
        "NormRatio": {row["NPU Name"]: row["NormRatio"] for row in statistics_rows},
        "bf16_inputs": [(row["api_name"], row["pert_mode"]) for row in fragile],
        "tensor_files": str(out / "tensor_a" / "step0" / "rank" / "dump_tensor_data"),
    }
    print(json.dumps(summary, indent=1))


if __name__ == "__main__":
    main()
