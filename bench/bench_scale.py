"""Multi-rank analysis at scale: compare wall time over 8, 64 and 512 synthetic ranks on the local engine and on
a Ray cluster of two nodes started on this machine, the cost per rank as ranks grow, and db build rows per
second.

    python bench/bench_scale.py [--ranks 8,64,512] [--calls 24] [--steps 20] [--no-ray]

Needs msprobe-core[db,ray] and msprobe-cli. Every rank is a synthetic statistics dump of ``--calls`` API
calls (bench/synthetic_ranks.py); the bench side differs by a constant drift.
"""

from __future__ import annotations

import argparse
import shutil
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
from msprobe.core.compare.run import compare_distributed
from msprobe.core.jobs import Engine
from msprobe.core.store.build import build_store
from ray_cluster import two_nodes
from synthetic_ranks import write_run


def time_compare(root: Path, ranks: int, engine: Engine, label: str) -> float:
    output = root / f"out-{ranks}-{label}"
    start = time.perf_counter()
    summaries = compare_distributed(root / f"npu{ranks}" / "step0", root / f"bench{ranks}" / "step0", output,
                                    engine=engine)  # fmt: skip
    seconds = time.perf_counter() - start
    assert len(summaries) == ranks
    shutil.rmtree(output)
    return seconds


def time_build(root: Path, engine: Engine, label: str) -> tuple[int, float]:
    store = root / f"store-{label}"
    start = time.perf_counter()
    summary = build_store(root / "run", store, engine=engine)
    seconds = time.perf_counter() - start
    shutil.rmtree(store)
    return summary.rows, seconds


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--ranks", default="8,64,512")
    parser.add_argument("--calls", type=int, default=24)
    parser.add_argument("--steps", type=int, default=20, help="steps of the 64-rank run db build reads")
    parser.add_argument("--no-ray", dest="ray", action="store_false")
    args = parser.parse_args()
    counts = [int(n) for n in args.ranks.split(",")]
    root = Path(tempfile.mkdtemp(prefix="msprobe_bench_scale_"))
    try:
        for ranks in counts:
            write_run(root / f"npu{ranks}", ranks, 1, args.calls)
            write_run(root / f"bench{ranks}", ranks, 1, args.calls, drift=1.001)
        write_run(root / "run", 64, args.steps, args.calls)
        engines = [("local", Engine())]
        results: dict[tuple[int, str], float] = {}
        builds: dict[str, tuple[int, float]] = {}
        for ranks in counts:
            results[(ranks, "local")] = time_compare(root, ranks, Engine(), "local")
        builds["local"] = time_build(root, Engine(), "local")
        if args.ray:
            with two_nodes() as (address, _):
                ray_engine = Engine("ray", address=address)
                engines.append(("ray, 2 nodes", ray_engine))
                time_compare(root, counts[0], ray_engine, "warm-up")  # workers start and import once
                for ranks in counts:
                    results[(ranks, "ray, 2 nodes")] = time_compare(root, ranks, ray_engine, "ray")
                builds["ray, 2 nodes"] = time_build(root, ray_engine, "ray")
    finally:
        shutil.rmtree(root, ignore_errors=True)
    print(f"compare, {args.calls} calls ({args.calls * 2} rows) per rank")
    print(f"{'ranks':>6} " + " ".join(f"{label + ' s':>16} {'s/rank':>8}" for label, _ in engines))
    for ranks in counts:
        cells = []
        for label, _ in engines:
            seconds = results[(ranks, label)]
            cells.append(f"{seconds:16.2f} {seconds / ranks:8.3f}")
        print(f"{ranks:>6} " + " ".join(cells))
    for label, _ in engines:
        first, last = counts[0], counts[-1]
        growth = (results[(last, label)] / last) / (results[(first, label)] / first)
        print(f"cost per rank, {last} vs {first} ranks ({label}): {growth:.2f}x")
    print(f"db build, 64 ranks x {args.steps} steps")
    for label, (rows, seconds) in builds.items():
        print(f"  {label}: {rows} rows in {seconds:.2f} s, {rows / seconds:,.0f} rows/s")


if __name__ == "__main__":
    main()
