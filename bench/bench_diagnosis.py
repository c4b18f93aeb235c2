"""How often the diagnosis names the right place: injected faults, scored as precision@1.

    python bench/bench_diagnosis.py                      # every fault, every mode, both regimes
    python bench/bench_diagnosis.py --quick              # the subset the tests run
    python bench/bench_diagnosis.py --modes md5 --regimes exact --only attention.weight,cnn.data
    python bench/bench_diagnosis.py --level L1           # level L1 dumps: no modules, so step, phase and API
    python bench/bench_diagnosis.py --level L0           # level L0 dumps: modules alone, so module, step, phase

Each fault of diagnosis_faults.py is trained for two steps (AdamW) beside an untouched twin, both dumped at
level mix (or L1, or L0) in the chosen mode (statistics, md5, xor, tensor); then ``diagnose_runs`` compares the
two dump folders. In the exact regime both runs are on this machine as they are; in the noisy regime the faulty
run computes every matrix product in bfloat16. A fault is scored right when the answer's module path (and, where
the fault names one, its API kind) is the fault's, at the fault's step and phase; a negative control is right
when no divergence is reported. "uncertain" is counted apart from wrong. Targets (printed as met or not):
exact regime, module and API right on at least 95% of faults in every mode (md5 and xor 100%) and no divergence
on a negative control; noisy regime, module right on at least 80% and no wrong answer (uncertain instead), in
statistics, md5 and tensor mode (an xor dump holds checksums alone, with no distance to weigh rounding by: its
noisy row is printed, not held to a target). At level L0 (no API call, no argument recorded): exact regime,
module right on at least 95% in every mode and no divergence on a control; noisy regime, no divergence on a
control and no wrong answer where the exact regime is right.
"""

from __future__ import annotations

import argparse
import json
import shutil
import sys
import tempfile
import time
from collections import defaultdict
from contextlib import nullcontext
from dataclasses import dataclass
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).parent))
from diagnosis_faults import FAULTS, FROZEN_HELD_OUT, NOT_SEEN, Bfloat16Matmuls, Fault, build, expectation

from msprobe.pytorch import PrecisionDebugger, seed_all

MODES = ("statistics", "md5", "xor", "tensor")
REGIMES = ("exact", "noisy")
STEPS = 2
QUICK = (
    "attention.weight",
    "attention.gelu_approximate",
    "attention.fc_bfloat16",
    "attention.head_lr",
    "attention.mask_inplace",
    "attention.control_commuted",
    "cnn.data",
    "cnn.nan_pixel_step1",
    "cnn.conv1_gradient",
    "cnn.control_torch_relu",
    "moe.router_temperature",
    "moe.control_out_of_place",
    "gpt.adam_eps",
    "cnn.bn1_momentum",
    "gpt.control_arange_start",
    "gpt.attn_wrong_backward",
)


def _config(mode: str, dump_path: Path, level: str = "mix") -> dict:
    config = {"task": "statistics", "level": level, "dump_path": str(dump_path), "step": list(range(STEPS))}
    if mode == "tensor":
        config["task"] = "tensor"
    else:
        config["statistics"] = {"summary_mode": mode}
    return config


def train(
    fault: Fault | None, arch: str, mode: str, noisy: bool, dump_path: Path, world: int = 1, level: str = "mix"
) -> Path:
    """Two steps of ``arch`` with ``fault`` applied (None: untouched), dumped at mix in ``mode``; ``world``
    processes of a data-parallel run (gloo on this machine) when above 1."""
    if world > 1:
        import socket

        import torch.multiprocessing as mp

        with socket.socket() as probe:  # a free port for this run's rendezvous
            probe.bind(("127.0.0.1", 0))
            port = probe.getsockname()[1]
        name = fault.name if fault is not None else None  # faults hold closures: each process looks it up
        mp.spawn(_rank_main, (name, arch, mode, noisy, dump_path, world, port, level), nprocs=world, join=True)
        return dump_path
    _train(fault, arch, mode, noisy, dump_path, None, level)
    return dump_path


def _rank_main(
    rank: int, name: str | None, arch: str, mode: str, noisy: bool, dump_path: Path, world: int, port: int, level: str
) -> None:
    import torch.distributed as dist

    fault = next((f for f in FAULTS + FROZEN_HELD_OUT if f.name == name), None)

    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=world)
    try:
        _train(fault, arch, mode, noisy, dump_path, rank, level)
    finally:
        dist.destroy_process_group()


def _train(
    fault: Fault | None, arch: str, mode: str, noisy: bool, dump_path: Path, rank: int | None, level: str = "mix"
) -> None:
    config_file = dump_path.parent / (f"{dump_path.name}.{rank}.json" if rank is not None else f"{dump_path.name}.json")
    config_file.parent.mkdir(parents=True, exist_ok=True)
    config_file.write_text(json.dumps(_config(mode, dump_path, level)))
    train_with(fault, arch, config_file, noisy, rank)


def train_with(fault: Fault | None, arch: str, config_file: Path, noisy: bool = False, rank: int | None = None) -> None:
    """The training of ``train`` under any config file (a flight recorder's, a live diff's)."""
    torch.set_num_threads(1)
    seed_all(1234, mode=True)
    setup = build(arch)
    setup.rank = rank
    if rank is not None:  # each process its own share of the data
        plain = setup.batch
        setup.batch = lambda step: plain(100 * (rank + 1) + step)
    if fault is not None and fault.apply is not None:
        fault.apply(setup)
    debugger = PrecisionDebugger(config_path=str(config_file), model=setup.model)
    for step in range(STEPS):
        for hook in setup.before_step:
            hook(step)
        debugger.start()
        with Bfloat16Matmuls() if noisy else nullcontext():
            loss = setup.loss(setup.model, setup.batch(step))
            loss.backward()
        if rank is not None:
            _average_gradients(setup.model)
        setup.optimizer.step()
        setup.optimizer.zero_grad()
        debugger.stop()
        debugger.step()


def _average_gradients(model: torch.nn.Module) -> None:
    import torch.distributed as dist

    for parameter in model.parameters():
        if parameter.grad is not None:
            dist.all_reduce(parameter.grad)
            parameter.grad /= dist.get_world_size()


@dataclass
class Score:
    fault: Fault
    mode: str
    regime: str
    answer: object
    module_right: bool
    api_right: bool | None
    uncertain: bool
    control: bool  # a negative control, or a fault the dump's level cannot see: no divergence may be named


GIVEN = ("data", "undumped", "gradient")  # causes that say a call was given what differs, made outside it


def score(fault: Fault, mode: str, regime: str, answer, level: str = "mix") -> Score:
    """Right module (and API kind where the fault names one) at the right step and phase; a control: none. A
    level L1 dump holds no modules: there the module counts as right when step and phase are. A level L0 dump
    holds no API calls: there no API kind is scored."""
    expect = expectation(fault, level)
    uncertain = answer.verdict == "uncertain"
    if expect is None or expect == NOT_SEEN:
        quiet = answer.verdict in ("none", "uncertain") if regime == "noisy" else answer.verdict == "none"
        return Score(fault, mode, regime, answer, quiet, quiet, uncertain, True)
    placed = answer.verdict == "divergence" and answer.step == expect.step and answer.phase == expect.phase
    if expect.rank is not None:
        placed = placed and answer.rank == expect.rank
    seen = expect.seen_at is not None and answer.module == expect.seen_at and answer.cause in GIVEN
    module_right = placed and (level == "L1" or answer.module == expect.module or seen)
    api_right = None
    if expect.api is not None and level != "L0":
        api_right = module_right and answer.api is not None and api_kind(answer.api) == expect.api
    return Score(fault, mode, regime, answer, module_right, api_right, uncertain, False)


def api_kind(entry: str) -> str:
    """``Functional.linear.3.forward`` -> ``Functional.linear``."""
    parts = entry.split(".")
    return ".".join(parts[:-2]) if len(parts) > 2 and parts[-2].isdigit() else entry


def run(
    faults: list[Fault],
    modes: list[str],
    regimes: list[str],
    root: Path,
    verbose: bool = False,
    keep: bool = False,
    level: str = "mix",
) -> list[Score]:
    from msprobe.core.diagnosis import diagnose_runs

    scores = []
    golden: dict[tuple[str, str], Path] = {}
    for fault in faults:
        for mode in modes:
            key = (fault.arch, mode, fault.world)
            if key not in golden:
                folder = root / "golden" / f"{fault.arch}_{mode}_{fault.world}"
                golden[key] = train(None, fault.arch, mode, False, folder, fault.world, level)
            for regime in regimes:
                folder = root / regime / f"{fault.name}_{mode}"
                tested = train(fault, fault.arch, mode, regime == "noisy", folder, fault.world, level)
                answer = diagnose_runs(tested, golden[key])
                scored = score(fault, mode, regime, answer, level)
                scores.append(scored)
                if verbose:
                    mark = "ok " if scored.module_right and scored.api_right is not False else "BAD"
                    print(f"{mark} {regime:5} {mode:10} {fault.name:32} {answer.line()}", flush=True)
                if not keep:
                    shutil.rmtree(tested, ignore_errors=True)
    return scores


def _percent(hits: int, total: int) -> str:
    return f"{100 * hits / total:5.1f}% ({hits}/{total})" if total else "  -"


def table(scores: list[Score], level: str = "mix") -> tuple[list[str], bool]:
    """One line per regime and mode: precision@1 of module and API, uncertain and wrong counts, controls. At
    level L0 the noisy regime is held to a target of its own (see ``_l0_noise_met``)."""
    groups: dict[tuple[str, str], list[Score]] = defaultdict(list)
    for scored in scores:
        groups[(scored.regime, scored.mode)].append(scored)
    lines = [
        f"{'regime':7} {'mode':10} {'module@1':>16} {'API@1':>16} {'uncertain':>9} {'wrong':>5} {'controls quiet':>16}"
    ]
    met = True
    for (regime, mode), group in sorted(groups.items()):
        faults = [s for s in group if not s.control]
        controls = [s for s in group if s.control]
        with_api = [s for s in faults if s.api_right is not None]
        module_hits = sum(s.module_right for s in faults)
        api_hits = sum(bool(s.api_right) for s in with_api)
        uncertain = sum(s.uncertain for s in faults)
        wrong = sum(not s.module_right and not s.uncertain for s in faults)
        quiet = sum(s.module_right for s in controls)
        lines.append(
            f"{regime:7} {mode:10} {_percent(module_hits, len(faults)):>16} {_percent(api_hits, len(with_api)):>16} "
            f"{uncertain:>9} {wrong:>5} {_percent(quiet, len(controls)):>16}"
        )
        if regime == "exact":
            floor = 1.0 if mode in ("md5", "xor") and level != "L0" else 0.95
            met &= module_hits >= floor * len(faults) and api_hits >= floor * len(with_api) and quiet == len(controls)
        elif mode == "xor":  # an xor dump holds checksums alone: no distance to weigh rounding by
            continue
        elif level == "L0":
            met &= module_hits >= L0_NOISY_FLOOR * len(faults) and _l0_noise_met(group, groups.get(("exact", mode), []))
        else:
            met &= module_hits >= 0.8 * len(faults) and wrong == 0
    return lines, met


# at L0 among rounding differences, "uncertain" is an honest answer, but a diagnosis that said it for nearly
# everything would meet the rest of the target: this many faults must still be named right (the whole bench
# names 74 to 76% there, the tests' quick subset 7 of its 11)
L0_NOISY_FLOOR = 0.6


def _l0_noise_met(noisy: list[Score], exact: list[Score]) -> bool:
    """An L0 dump records no argument and no API call, so among rounding differences a small fault (an eps,
    a precision, a learning rate) is out of its reach: there, every control is quiet, and noise turns no
    answer wrong that the exact regime has right (uncertain at worst)."""
    wrong_exact = {s.fault.name for s in exact if not s.control and not s.module_right and not s.uncertain}
    for scored in noisy:
        if scored.control and not scored.module_right:
            return False
        if not scored.control and not scored.module_right and not scored.uncertain:
            if not exact or scored.fault.name not in wrong_exact:
                return False
    return True


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--modes", default=",".join(MODES))
    parser.add_argument("--regimes", default=",".join(REGIMES))
    parser.add_argument("--only", default="", help="comma-separated fault names (default: all)")
    parser.add_argument("--quick", action="store_true", help="the subset the tests run")
    parser.add_argument(
        "--frozen", action="store_true", help="the frozen held-out set instead, which no rule is fitted to"
    )
    parser.add_argument("--out", type=Path, default=None, help="keep the dumps here (default: a temporary folder)")
    parser.add_argument("-v", "--verbose", action="store_true", help="one line per case")
    parser.add_argument(
        "--level",
        choices=("mix", "L1", "L0"),
        default="mix",
        help="the dumps' level (L1: no modules, module@1 is then the right step and phase; L0: no API calls)",
    )
    args = parser.parse_args()
    wanted = set(QUICK) if args.quick else set(filter(None, args.only.split(",")))
    faults = [fault for fault in (FROZEN_HELD_OUT if args.frozen else FAULTS) if not wanted or fault.name in wanted]
    root = args.out or Path(tempfile.mkdtemp(prefix="msprobe_diagnosis_"))
    started = time.perf_counter()
    modes, regimes = args.modes.split(","), args.regimes.split(",")
    scores = run(faults, modes, regimes, root, args.verbose, keep=args.out is not None, level=args.level)
    lines, met = table(scores, args.level)
    controls = sum(1 for fault in faults if fault.expect is None)
    unseen = sum(1 for fault in faults if expectation(fault, args.level) == NOT_SEEN)
    print(f"{len(faults) - controls} faults and {controls} negative controls over {len({f.arch for f in faults})} "
          f"architectures, level {args.level}, {time.perf_counter() - started:.0f} s")  # fmt: skip
    if unseen:
        print(f"{unseen} faults change nothing an {args.level} dump records: counted with the controls")
    print("\n".join(lines))
    print("targets met" if met else "targets NOT met")
    if args.out is None:
        shutil.rmtree(root, ignore_errors=True)
    return 0 if met else 1


if __name__ == "__main__":
    raise SystemExit(main())
