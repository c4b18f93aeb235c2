"""Compare speed: two step dumps of workload W, and a synthetic dump of N entries.

    python bench/bench_compare.py [--entries 1000000] [--out /tmp/msprobe_bench_compare]

Prints wall times of `msprobe compare` as a user runs it (start-up included)
for W in statistics and tensor mode, and time and peak memory for the
synthetic dump at several sizes, to show they grow linearly. The synthetic
sides differ by 0.1% in every statistic, so every cell holds a full-length
float, as in real results.
Last, an md5 compare of the largest size (every value differs). The compare ends with the diagnosis (where the
runs part ways): its share is printed beside the W compare (against the same compare with -c) and the smaller
synthetic sizes.
Then the xlsx of the 100,000-entry compare alone: msprobe's row writer against XlsxWriter writing the same
table by itself (what msprobe used before).
Targets: W statistics compare <= 1 s wall including start-up; 100,000 synthetic entries with their xlsx <= 4 s;
1,000,000 synthetic entries (a streamed compare) <= 30 s and <= 2 GB in the largest process
(docs/performance.md).
"""

from __future__ import annotations

import argparse
import json
import resource
import shutil
import subprocess
import sys
import time
import zlib
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))


def dump_workload(out: Path, task: str) -> Path:
    import torch
    from workload import make_workload

    from msprobe.pytorch import PrecisionDebugger

    torch.set_num_threads(1)
    model, train_step = make_workload()
    debugger = PrecisionDebugger(task=task, level="L1", dump_path=str(out), model=model, step=[0])
    debugger.start()
    train_step()
    debugger.stop()
    debugger.step()
    return out / "step0" / "rank" / "dump.json"


def cli_compare(npu: Path, bench: Path, out: Path, *options: str) -> float:
    out.mkdir(parents=True, exist_ok=True)
    spec = out / "compare.json"
    spec.write_text(json.dumps({"npu_path": str(npu), "bench_path": str(bench)}))
    start = time.perf_counter()
    subprocess.run(
        [sys.executable, "-m", "msprobe.cli.main", "compare", "-i", str(spec), "-o", str(out / "result"), *options],
        check=False,
        capture_output=True,
    )
    return time.perf_counter() - start


def diagnosis_seconds(npu: Path, bench: Path) -> float:
    """The diagnosis alone (where the runs part ways) on two dumps already read, as the compare runs it."""
    from msprobe.core.diagnosis import diagnose_dumps
    from msprobe.core.dump.reader import read_dump

    first, second = read_dump(npu), read_dump(bench)
    start = time.perf_counter()
    diagnose_dumps(first, second)
    return time.perf_counter() - start


def synthetic(path: Path, entries: int, scale: float = 1.0, md5: bool = False) -> Path:
    """A statistics dump.json of ``entries`` calls, one input and one output each, with full-length floats as
    real dumps hold; ``scale`` shifts every statistic (the bench side differs from the NPU side); ``md5``: each
    summary holds an md5 value too (differing where ``scale`` does), as the md5 task writes them."""
    path.mkdir(parents=True, exist_ok=True)
    statistics = (1.4859726428985596, -1.5021066665649414, 0.0104875639081001, 20.09383773803711)
    stats = [value * scale for value in statistics]
    tensor = {
        "type": "torch.Tensor",
        "dtype": "torch.float32",
        "shape": [8, 64, 128],
        "Max": stats[0],
        "Min": stats[1],
        "Mean": stats[2],
        "Norm": stats[3],
        "requires_grad": True,
    }
    if md5:
        tensor["md5"] = f"{zlib.crc32(repr(stats).encode()):08x}"
    with open(path / "dump.json", "w") as handle:
        handle.write('{"task": "statistics", "level": "L1", "framework": "pytorch", "dump_data_dir": null, "data": {')
        for index in range(entries):
            entry = {"input_args": [tensor], "input_kwargs": {}, "output": [tensor]}
            handle.write(("," if index else "") + json.dumps(f"Torch.api{index % 997}.{index // 997}.forward") + ":")
            handle.write(json.dumps(entry))
        handle.write("}}")
    return path / "dump.json"


def synthetic_change(dump_json: Path, folder: Path) -> Path:
    """``dump_json`` with one statistic of its middle entry changed: a run that parts ways there."""
    raw = json.loads(dump_json.read_text())
    names = list(raw["data"])
    entry = raw["data"][names[len(names) // 2]]
    for value in entry.get("output", []):
        if isinstance(value, dict) and "Max" in value:
            value["Max"] = float(value["Max"]) * 1.5 + 1.0
            break
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "dump.json").write_text(json.dumps(raw))
    return folder / "dump.json"


def in_process_compare(npu: Path, bench: Path, out: Path) -> tuple[float, float]:
    """Seconds, and the peak memory of the largest process (the compare's helper process included)."""
    code = (
        "import resource, sys, time; from msprobe.core.compare.run import compare; s = time.perf_counter();"
        f"compare({{'npu_json_path': {str(npu)!r}, 'bench_json_path': {str(bench)!r}}}, {str(out)!r});"
        "peak = max(resource.getrusage(who).ru_maxrss for who in (resource.RUSAGE_SELF, resource.RUSAGE_CHILDREN));"
        "print(time.perf_counter() - s, peak / 1024)"
    )
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    seconds, megabytes = result.stdout.split()
    return float(seconds), float(megabytes)


def xlsx_seconds(csv_path: Path) -> tuple[float, float]:
    """The compare's table written as xlsx by msprobe's writer and by XlsxWriter alone, every other row red."""
    import math

    import pandas as pd
    import xlsxwriter

    from msprobe.core.compare.xlsx import XlsxStream

    table = pd.read_csv(csv_path)
    marks = {index: "red" for index in range(0, len(table), 2)}
    start = time.perf_counter()
    stream = XlsxStream(csv_path.with_name("ours.xlsx"), list(table.columns))
    for first in range(0, len(table), 50_000):
        block = table.iloc[first : first + 50_000].reset_index(drop=True)
        stream.add_table(block, {i - first: c for i, c in marks.items() if first <= i < first + 50_000})
    stream.close()
    ours = time.perf_counter() - start
    start = time.perf_counter()
    workbook = xlsxwriter.Workbook(str(csv_path.with_name("theirs.xlsx")), {"constant_memory": True})
    sheet = workbook.add_worksheet("Sheet")
    red = workbook.add_format({"bg_color": "#FF0000"})
    sheet.write_row(0, 0, list(table.columns), workbook.add_format({"bold": True}))
    for index, row in enumerate(table.itertuples(index=False, name=None)):
        cells = [f"{v}\t" if isinstance(v, float) and not math.isfinite(v) else v for v in row]
        sheet.write_row(index + 1, 0, cells, red if index in marks else None)
    workbook.close()
    return ours, time.perf_counter() - start


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--entries", type=int, default=1_000_000)
    parser.add_argument("--out", type=Path, default=Path("/tmp/msprobe_bench_compare"))
    args = parser.parse_args()
    shutil.rmtree(args.out, ignore_errors=True)
    args.out.mkdir(parents=True)
    for task in ("statistics", "tensor"):
        npu = dump_workload(args.out / f"{task}_a", task)
        bench = dump_workload(args.out / f"{task}_b", task)
        seconds = cli_compare(npu, bench, args.out / f"{task}_cmp")
        entries = len(json.loads(npu.read_text())["data"])
        target = "  (target <= 1 s)" if task == "statistics" else ""
        print(f"W {task:<10} {entries} entries: msprobe compare {seconds:.2f} s wall{target}")
        if task == "statistics":  # the same compare without the diagnosis (-c), and the diagnosis of a change
            plain = cli_compare(npu, bench, args.out / f"{task}_plain", "-c")
            changed = synthetic_change(npu, args.out / "W_changed")
            print(f"W {task:<10} without the diagnosis (-c) {plain:.2f} s: with it {seconds / plain:.2f}x; "
                  f"the diagnosis of a run with one value changed {diagnosis_seconds(changed, npu):.3f} s")  # fmt: skip
    sizes = sorted({max(args.entries // 100, 1), max(args.entries // 10, 1), args.entries})
    for size in sizes:
        npu = synthetic(args.out / f"syn{size}_a", size)
        bench = synthetic(args.out / f"syn{size}_b", size, scale=1.001)
        seconds, megabytes = in_process_compare(npu, bench, args.out / f"syn{size}_cmp")
        target = "  (target for 1,000,000: <= 30 s, <= 2048 MB)" if size == 1_000_000 else ""
        target = "  (target with its xlsx: <= 4 s)" if size == 100_000 else target
        print(
            f"synthetic {size:>9} entries: {seconds:8.2f} s, peak RSS {megabytes:8.0f} MB, "
            f"{seconds / size * 1e6:6.2f} us/entry{target}"
        )
        if size < 200_000:  # larger dumps stream, and the compare leaves the diagnosis to --first-divergence
            diagnosed = diagnosis_seconds(npu, bench)
            print(f"  of which the diagnosis {diagnosed:.2f} s ({diagnosed / seconds:.0%}), "
                  f"{diagnosed / size * 1e6:.1f} us/entry")  # fmt: skip
        if size == 100_000:
            ours, theirs = xlsx_seconds(next((args.out / f"syn{size}_cmp").glob("compare_result_*.csv")))
            print(f"  its xlsx alone: msprobe {ours:.2f} s, XlsxWriter by itself {theirs:.2f} s ({theirs / ours:.1f}x)")
        shutil.rmtree(args.out / f"syn{size}_a")
        shutil.rmtree(args.out / f"syn{size}_b")
    npu = synthetic(args.out / "md5_a", args.entries, md5=True)
    bench = synthetic(args.out / "md5_b", args.entries, scale=1.001, md5=True)
    seconds, megabytes = in_process_compare(npu, bench, args.out / "md5_cmp")
    print(f"synthetic md5 {args.entries:>5} entries: {seconds:8.2f} s, peak RSS {megabytes:8.0f} MB")
    shutil.rmtree(args.out / "md5_a")
    shutil.rmtree(args.out / "md5_b")
    print("peak RSS of this driver:", resource.getrusage(resource.RUSAGE_SELF).ru_maxrss // 1024, "MB")


if __name__ == "__main__":
    main()
