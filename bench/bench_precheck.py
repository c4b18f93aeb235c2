"""Accuracy pre-check speed on workload W.

    python bench/bench_precheck.py [--out /tmp/msprobe_bench_precheck]

Prints APIs checked per second for run_ut and multi_run_ut -n 2 on a
statistics dump of one W step and on one holding that step's APIs
``--copies`` times (6: 3,240 APIs, several seconds of work, where the
helper processes have time to start), and the slowdown of a W training step
run inside PtdbgDispatch (every ATen op re-run on the CPU in float64).
"""

from __future__ import annotations

import argparse
import csv
import json
import shutil
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).parent))
from workload import make_workload

from msprobe.core.precheck.driver import run_ut
from msprobe.pytorch import PrecisionDebugger
from msprobe.pytorch.precheck.online_dispatch import PtdbgDispatch


def copies(dump_json: Path, count: int) -> Path:
    """A dump holding each API of ``dump_json`` ``count`` times (call numbers moved on by 10,000 per copy)."""
    source = json.loads(dump_json.read_text())
    data = {}
    for copy in range(count):
        for name, entry in source["data"].items():
            parts = name.split(".")
            number = next((i for i, part in enumerate(parts) if part.isdigit()), None)
            if number is not None:
                parts[number] = str(int(parts[number]) + 10_000 * copy)
                data[".".join(parts)] = entry
    target = dump_json.parent.parent / f"copies{count}" / "dump.json"
    target.parent.mkdir(parents=True, exist_ok=True)
    target.write_text(json.dumps({**source, "data": data}))
    return target


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--out", type=Path, default=Path("/tmp/msprobe_bench_precheck"))
    parser.add_argument("--copies", type=int, default=6)
    args = parser.parse_args()
    shutil.rmtree(args.out, ignore_errors=True)
    torch.set_num_threads(1)
    model, train_step = make_workload()
    debugger = PrecisionDebugger(task="statistics", level="L1", dump_path=str(args.out / "dump"), model=model, step=[0])
    debugger.start()
    train_step()
    debugger.stop()
    debugger.step()
    dump_json = args.out / "dump" / "step0" / "rank" / "dump.json"
    for label, dump in (("one step", dump_json), (f"{args.copies} copies", copies(dump_json, args.copies))):
        for processes in (1, 2, 1, 2):  # interleaved: a drift in the machine's speed hits both
            start = time.perf_counter()
            summary = run_ut(dump_json=dump, output_dir=args.out / f"ut-{label}-{processes}-{start}",
                             runner_path="msprobe.pytorch.precheck.run_ut:ApiRunner",
                             save_error_path="msprobe.pytorch.precheck.run_ut:save_error_data", devices=["cpu"],
                             processes=processes)  # fmt: skip
            seconds = time.perf_counter() - start
            command = "run_ut" if processes == 1 else "multi_run_ut -n 2"
            print(
                f"{label:<9} {command:<18} {summary.checked} APIs in {seconds:6.2f} s: "
                f"{summary.checked / seconds:6.1f} APIs/s ({summary.passed} pass, {summary.warnings} warning, "
                f"{summary.errors} error, {summary.skipped} skip)"
            )
    model, train_step = make_workload()
    train_step()
    plain = []
    for _ in range(3):
        start = time.perf_counter()
        train_step()
        plain.append(time.perf_counter() - start)
    start = time.perf_counter()
    with PtdbgDispatch(dump_path=str(args.out / "dispatch")) as dispatch:
        train_step()
    inside = time.perf_counter() - start
    base = min(plain)
    rows = sum(1 for _ in csv.reader(open(dispatch.csv_path))) - 1
    print(
        f"PtdbgDispatch: step {inside:.2f} s vs {base * 1000:.0f} ms plain: {inside / base:.1f}x slower, "
        f"{dispatch.checked} ops checked ({rows} outputs), {dispatch.failed} failed"
    )


if __name__ == "__main__":
    main()
