"""Training-state monitor cost on workload W: step-time ratios for each kind of monitoring.

    python bench/bench_monitor.py [--steps 20]

Targets (the monitor's cost budget in docs/performance.md): weight gradients <= 1.02x, optimizer state <= 1.05x,
activations of all modules <= 1.3x.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).parent))
from workload import make_workload

from msprobe.pytorch import TrainerMon

CONFIGS = [
    ("none", None, None),
    ("weight gradients", {"wg_distribution": True, "ops": ["min", "max", "norm"]}, 1.02),
    ("optimizer state", {"mv_distribution": True, "ops": ["min", "max", "norm"]}, 1.05),
    (
        "activations",
        {"xy_distribution": True, "all_xy": True, "forward_only": True, "ops": ["min", "max", "norm"]},
        1.3,
    ),
    ("activations + grads", {"xy_distribution": True, "all_xy": True, "ops": ["min", "max", "norm"]}, 1.3),
]


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--steps", type=int, default=20)
    args = parser.parse_args()
    torch.set_num_threads(1)
    folder = Path(tempfile.mkdtemp(prefix="msprobe_monitor_"))
    os.environ["MONITOR_OUTPUT_DIR"] = str(folder / "out")
    runs = {}
    for label, config, _target in CONFIGS:
        model, train_step = make_workload()
        monitor = None
        if config is not None:
            path = folder / f"{label.replace(' ', '_')}.json"
            path.write_text(json.dumps(config))
            monitor = TrainerMon(str(path), params_have_main_grad=False)
            monitor.set_monitor(model, optimizer=train_step.optimizer)
        runs[label] = (train_step, monitor, [])
    # one step of each configuration in turn, so that drift in machine speed hits all alike
    for round_number in range(args.steps + 1):
        for train_step, _monitor, times in runs.values():
            start = time.perf_counter()
            train_step()
            if round_number:
                times.append(time.perf_counter() - start)
    results = {}
    for label, (_step, monitor, times) in runs.items():
        if monitor is not None:
            monitor.finish()
        results[label] = statistics.median(times)
    base = results["none"]
    for label, _config, target in CONFIGS:
        ratio = results[label] / base
        verdict = "" if target is None else f"<= {target}x  {'met' if ratio <= target else 'NOT met'}"
        print(f"{label:<20} {results[label] * 1000:8.1f} ms {ratio:6.3f}x  {verdict}")


if __name__ == "__main__":
    main()
