"""What comparing across layouts costs, and what dumping a DTensor run costs: ``python bench/bench_layout_speed.py``.

1. **Merged compare of 8 ranks.** The LM of layout_faults.py trains one step with DDP over 8 processes (gloo,
   this machine's CPU), twice, and once in one process on the global batch. Timed: the rank-by-rank compare of
   the two 8-rank runs (8 pairs, the reference's way), and the merged compare of one 8-rank run against the
   one-process run (8 ranks merged into the global run, then one pair). Target: the merged compare costs at
   most 1.5x the rank-by-rank one.
2. **The DTensor dump.** The LM, 512 wide, trains in one process with plain tensors, and over 2 processes in
   tensor parallelism (DTensor); each run's step is timed undumped and dumped (statistics, level mix), the two
   taking turns step by step on two copies of the model, in fresh processes, and each kind's median step is
   kept. The dumped step over the undumped one is the dump's ratio.
   The two runs take turns for five rounds, and a round's difference is the DTensor run's ratio less the plain
   run's just before it: this machine's speed drifts by a third over a minute, so only runs side by side in
   time are compared. The median round is printed, with every round's difference. Target: the DTensor run's
   ratio within 0.1 of the plain run's.

Ratios are measured in one run of this script, on one machine; the plain figures are printed beside them.
"""

from __future__ import annotations

import argparse
import json
import socket
import statistics
import sys
import tempfile
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
from layout_faults import LM, MODELS, batch, lay_out, loss_of, share_of

RANKS = 8
STEPS = 15  # timed steps (after one warm-up) for the dump's ratio, in each of ROUNDS rounds
ROUNDS = 5  # the plain and the DTensor runs take turns: this machine's speed drifts over a minute
WIDTH = 512  # the dump's ratio is timed on a wider LM, whose step is not all per-call overhead


def _port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def _step(model: torch.nn.Module, inputs: torch.Tensor, targets: torch.Tensor, optimizer) -> None:
    loss_of(model(inputs), targets).backward()
    optimizer.step()
    optimizer.zero_grad()


def _dump_one_step(model, inputs, targets, folder: Path, config_name: str) -> None:
    from msprobe.pytorch import PrecisionDebugger

    config = folder.parent / config_name
    config.write_text(json.dumps({"task": "statistics", "level": "mix", "dump_path": str(folder)}))
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    debugger = PrecisionDebugger(config_path=str(config), model=model)
    debugger.start()
    _step(model, inputs, targets, optimizer)
    debugger.stop()
    debugger.step()


def _ddp_rank(rank: int, world: int, folder: str, port: int) -> None:
    import torch.distributed as dist

    torch.set_num_threads(1)
    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=world)
    try:
        torch.manual_seed(0)
        model = lay_out(MODELS["lm"](), "ddp", world)
        inputs, targets = share_of("lm", "ddp", *_big_batch(), rank, world)
        _dump_one_step(model, inputs, targets, Path(folder), f"config.{rank}.json")
    finally:
        dist.destroy_process_group()


def _big_batch() -> tuple[torch.Tensor, torch.Tensor]:
    inputs, targets = batch("lm")
    return inputs.repeat(RANKS // 2, 1), targets.repeat(RANKS // 2, 1)  # a share of 2 rows for each of 8 ranks


def merged_compare(root: Path) -> tuple[float, float]:
    import torch.multiprocessing as mp

    from msprobe.core.compare.run import compare_distributed

    for name in ("ddp_a", "ddp_b"):
        mp.spawn(_ddp_rank, (RANKS, str(root / name), _port()), nprocs=RANKS, join=True)
    torch.manual_seed(0)
    _dump_one_step(MODELS["lm"](), *_big_batch(), root / "golden", "config.json")
    started = time.perf_counter()
    compare_distributed(root / "ddp_a", root / "ddp_b", root / "out_ranks", processes=1)
    by_rank = time.perf_counter() - started
    started = time.perf_counter()
    [summary] = compare_distributed(root / "ddp_a", root / "golden", root / "out_merged", processes=1)
    merged = time.perf_counter() - started
    assert summary.verdict == "PASS", summary.line()
    return by_rank, merged


def _timed_steps(make_model, inputs, targets, folder: Path, config_name: str) -> tuple[float, float]:
    """The median time of a training step undumped and dumped at mix, the two taking turns step by step on two
    copies of the model (the debugger sees only the second): the machine's speed drifts within seconds, and
    timing one kind after the other measured the drift as much as the dump."""
    from msprobe.pytorch import PrecisionDebugger

    plain_model, dumped_model = make_model(), make_model()
    config = folder.parent / config_name
    config.write_text(json.dumps({"task": "statistics", "level": "mix", "dump_path": str(folder)}))
    debugger = PrecisionDebugger(config_path=str(config), model=dumped_model)
    plain_optimizer = torch.optim.SGD(plain_model.parameters(), lr=0.0)  # the same step every time
    dumped_optimizer = torch.optim.SGD(dumped_model.parameters(), lr=0.0)
    plain_times, dumped_times = [], []
    for _ in range(STEPS + 1):
        started = time.perf_counter()
        _step(plain_model, inputs, targets, plain_optimizer)
        plain_times.append(time.perf_counter() - started)
        started = time.perf_counter()
        debugger.start()  # the API wrappers go on here and come off at stop: the plain step runs without them
        _step(dumped_model, inputs, targets, dumped_optimizer)
        debugger.stop()
        debugger.step()
        dumped_times.append(time.perf_counter() - started)
    return statistics.median(plain_times[1:]), statistics.median(dumped_times[1:])


def _tp_rank(rank: int, world: int, root: str, port: int) -> None:
    import torch.distributed as dist

    torch.set_num_threads(1)
    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=world)
    try:

        def make_model() -> torch.nn.Module:
            torch.manual_seed(0)
            return lay_out(LM(width=WIDTH, heads=8), "tp", world)

        inputs, targets = batch("lm")
        times = _timed_steps(make_model, inputs, targets, Path(root) / "tp", f"tp.{rank}.json")
        if rank == 0:
            (Path(root) / "tp_times.json").write_text(json.dumps(times))
    finally:
        dist.destroy_process_group()


def _plain_process(_index: int, root: str) -> None:
    """The plain run's two timings, in a fresh process as each tensor-parallel rank is."""
    torch.set_num_threads(1)

    def make_model() -> torch.nn.Module:
        torch.manual_seed(0)
        return LM(width=WIDTH, heads=8)

    inputs, targets = batch("lm")
    times = _timed_steps(make_model, inputs, targets, Path(root) / "single", "s.json")
    (Path(root) / "plain_times.json").write_text(json.dumps(times))


Times = tuple[float, float]  # a run's (undumped, dumped) step time


def dtensor_rounds(root: Path) -> list[tuple[Times, Times]]:
    """Each round's (plain, DTensor) step times, the plain run just before the DTensor run."""
    import torch.multiprocessing as mp

    rounds = []
    for _ in range(ROUNDS):
        mp.spawn(_plain_process, (str(root),), nprocs=1, join=True)
        mp.spawn(_tp_rank, (2, str(root), _port()), nprocs=2, join=True)
        plain = tuple(json.loads((root / "plain_times.json").read_text()))
        tensor_parallel = tuple(json.loads((root / "tp_times.json").read_text()))
        rounds.append((plain, tensor_parallel))
    return rounds


def _difference(round_times: tuple[Times, Times]) -> float:
    (plain, plain_dumped), (tp, tp_dumped) = round_times
    return tp_dumped / tp - plain_dumped / plain


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--root", type=Path, default=None)
    root = parser.parse_args().root or Path(tempfile.mkdtemp(prefix="msprobe-layout-speed-"))
    root.mkdir(parents=True, exist_ok=True)
    by_rank, merged = merged_compare(root)
    rounds = sorted(dtensor_rounds(root), key=_difference)
    (plain, plain_dumped), (tp, tp_dumped) = rounds[len(rounds) // 2]
    plain_ratio, tp_ratio = plain_dumped / plain, tp_dumped / tp
    compare_met = merged <= 1.5 * by_rank
    dump_met = tp_ratio - plain_ratio <= 0.1
    print(f"compare, {RANKS} ranks: rank by rank {by_rank:.2f} s, merged {merged:.2f} s: "
          f"{merged / by_rank:.2f}x (target <= 1.5x: {'met' if compare_met else 'NOT met'})")  # fmt: skip
    print(f"dump at mix, statistics, the median of {len(rounds)} rounds: plain tensors {plain * 1e3:.1f} -> "
          f"{plain_dumped * 1e3:.1f} ms/step ({plain_ratio:.2f}x); DTensor TP=2 {tp * 1e3:.1f} -> "
          f"{tp_dumped * 1e3:.1f} ms/step ({tp_ratio:.2f}x); difference {tp_ratio - plain_ratio:+.2f} "
          f"(target <= 0.1: {'met' if dump_met else 'NOT met'}); every round's: "
          f"{', '.join(f'{_difference(times):+.2f}' for times in rounds)}")  # fmt: skip
    return 0 if compare_met and dump_met else 1


if __name__ == "__main__":
    raise SystemExit(main())
