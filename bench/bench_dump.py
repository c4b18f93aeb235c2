"""Step time of workload W with each dump configuration, as a ratio to the untouched step.

    python bench/bench_dump.py [--steps 16] [--out /tmp/msprobe_bench] [--only "statistics L1,statistics mix"]

All configurations are measured in one run, one thread, after a warm-up;
each against a plain twin of the workload stepped in turn with it.
Targets (docs/performance.md): statistics L1 <= 1.5x, mix <= 1.7x,
md5 <= 2x, tensor L1 within 1.5x of writing the same bytes with numpy.save,
overflow_check L1 <= 1.3x, grad_probe L1 <= 1.2x, free benchmark
(improve_precision, forward, all APIs) <= 5x, flight_recorder L1 at most
statistics L1's ratio (and its window's memory at most window x one step's
dump.json, printed after the table).
"""

from __future__ import annotations

import argparse
import os
import shutil
import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).parent))
from in_turn import (
    Timing,
    add_only_option,
    chosen,
    dumped_step,
    numpy_twin,
    print_ratios,
    report_tensor_dump,
    time_in_turn,
)
from workload import make_workload

from msprobe.pytorch import PrecisionDebugger

CONFIGS = [
    ("none", None),
    ("statistics L1", {"task": "statistics", "level": "L1"}),
    ("statistics mix", {"task": "statistics", "level": "mix"}),
    ("md5 L1", {"task": "statistics", "level": "L1", "statistics": {"summary_mode": "md5"}}),
    ("tensor L1", {"task": "tensor", "level": "L1"}),
    ("structure mix", {"task": "structure", "level": "mix"}),
    ("overflow_check L1", {"task": "overflow_check", "level": "L1", "overflow_check": {"overflow_nums": -1}}),
    ("grad_probe L1", {"task": "grad_probe", "grad_probe": {"grad_level": "L1"}}),
    ("free_benchmark", {"task": "free_benchmark", "level": "L1", "free_benchmark": {"pert_mode": "improve_precision"}}),
    ("flight_recorder L1", {"task": "flight_recorder", "level": "L1", "flight_recorder": {"window": 5}}),
]
TARGETS = {
    "statistics L1": 1.5,
    "statistics mix": 1.7,
    "md5 L1": 2.0,
    "overflow_check L1": 1.3,
    "grad_probe L1": 1.2,
    "free_benchmark": 5.0,
}  # flight_recorder L1: at most statistics L1's ratio in the same run
FLIGHT_MEMORY: dict[str, int] = {}  # what the flight recorder's window held at the end of its run


def _saved_arrays(tensor_dir: Path) -> list:
    return [torch.load(path, weights_only=True).numpy() for path in sorted(tensor_dir.glob("*.pt"))]


def time_config(config: dict | None, steps: int, out: Path) -> Timing:
    """Median step time with this configuration and of a plain twin, one step of each in turn.

    Alternating keeps drifts in machine speed out of the ratio. The tensor
    task also times its yardstick in turn: a plain step plus numpy.save of
    the arrays the dump wrote.
    """
    model, train_step = make_workload()
    _plain_model, plain_step = make_workload()
    debugger = None
    if config is not None:
        import json

        config_file = out / "config.json"
        config_file.write_text(json.dumps({**config, "dump_path": str(out / "dump")}))
        debugger = PrecisionDebugger(config_path=str(config_file), model=model)
        if config["task"] == "grad_probe":
            debugger.monitor(model)

    yardstick = None
    if config is not None and config["task"] == "tensor":
        tensor_dir = out / "dump" / "step0" / "rank" / "dump_tensor_data"
        yardstick = numpy_twin(plain_step, lambda: _saved_arrays(tensor_dir), out / "numpy_copy")
    between = os.sync if yardstick is not None else None  # each file-writing step starts with no writeback pending
    result = time_in_turn(plain_step, dumped_step(debugger, train_step), steps, yardstick, between)
    if debugger is not None and config["task"] == "flight_recorder":
        flight = debugger._hooks.collector.flight
        FLIGHT_MEMORY.update(window=flight.window.maxlen + 1, bytes=flight.memory())
    if debugger is not None:
        debugger.finish()
    return result


def report_flight_memory(out: Path, timings: dict[str, Timing]) -> None:
    """The window's memory against the target: window x one step's dump.json (statistics L1's, same run)."""
    step_file = out / "statistics_L1" / "dump" / "step0" / "rank" / "dump.json"
    one_step = step_file.stat().st_size if step_file.exists() else None
    held = FLIGHT_MEMORY["bytes"]
    line = f"flight recorder: {FLIGHT_MEMORY['window'] - 1} past steps held in {held / 1e6:.2f} MB"
    if one_step:
        bound = FLIGHT_MEMORY["window"] * one_step
        line += f"; target window x dump.json = {bound / 1e6:.2f} MB ({held / bound:.2f} of it)"
    else:
        line += " (run 'statistics L1' too for the target)"
    if "statistics L1" in timings and "flight_recorder L1" in timings:
        ratio, reference = timings["flight_recorder L1"].ratio, timings["statistics L1"].ratio
        line += f"; step {ratio:.3f}x against statistics L1's {reference:.3f}x"
    print(line)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument(
        "--steps", type=int, default=16
    )  # medians of 16 alternating pairs: runs here differ by 0.1x at 6
    parser.add_argument("--out", type=Path, default=Path("/tmp/msprobe_bench"))
    add_only_option(parser)
    args = parser.parse_args()
    configs = chosen(parser, args.only, CONFIGS)
    torch.set_num_threads(1)
    timings: dict[str, Timing] = {}
    for label, config in configs:
        folder = args.out / label.replace(" ", "_")
        shutil.rmtree(folder, ignore_errors=True)
        folder.mkdir(parents=True)
        timings[label] = time_config(config, args.steps, folder)
        os.sync()  # the tensor dump's ~1 GB of dirty pages would otherwise be written back during the next runs
    targets = dict(TARGETS)
    if "statistics L1" in timings:
        targets["flight_recorder L1"] = round(timings["statistics L1"].ratio, 3)
    print_ratios(timings, targets)
    if FLIGHT_MEMORY:
        report_flight_memory(args.out, timings)
    if "tensor L1" in timings:
        report_tensor_dump(timings["tensor L1"], args.out / "tensor_L1" / "numpy_copy")


if __name__ == "__main__":
    main()
