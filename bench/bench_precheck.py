"""Accuracy pre-check speed on workload W.

    python bench/bench_precheck.py [--out /tmp/msprobe_bench_precheck]

Prints APIs checked per second for run_ut and multi_run_ut -n 2 on a
statistics dump of one W step, and the slowdown of a W training step run
inside PtdbgDispatch (every ATen op re-run on the CPU in float64).
"""

from __future__ import annotations

import argparse
import csv
import shutil
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).parent))
from workload import make_workload

from msprobe.core.precheck.driver import run_ut
from msprobe.pytorch import PrecisionDebugger
from msprobe.pytorch.online_dispatch import PtdbgDispatch


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--out", type=Path, default=Path("/tmp/msprobe_bench_precheck"))
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
    for processes in (1, 2):
        start = time.perf_counter()
        summary = run_ut(dump_json=dump_json, output_dir=args.out / f"ut{processes}",
                         runner_path="msprobe.pytorch.run_ut:ApiRunner",
                         save_error_path="msprobe.pytorch.run_ut:save_error_data", devices=["cpu"],
                         processes=processes)  # fmt: skip
        seconds = time.perf_counter() - start
        label = "run_ut" if processes == 1 else "multi_run_ut -n 2"
        print(
            f"{label:<18} {summary.checked} APIs in {seconds:6.2f} s: {summary.checked / seconds:6.1f} APIs/s "
            f"({summary.passed} pass, {summary.warnings} warning, {summary.errors} error, {summary.skipped} skip)"
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
