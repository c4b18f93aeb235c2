"""Replay scored on injected faults: ``python bench/bench_replay.py [--quick] [--only NAME,...] [-v]``.

Each single-process fault of the diagnosis benchmark (bench/diagnosis_faults.py) that sits in a module's
forward, or in an optimizer update (then seen in the next step's forward), is run in tensor mode beside its
architecture's fault-free run. The fault's module call is then replayed with the model as the faulted script
builds it (as ``msprobe replay`` takes it from a script: same seed, same fault, before any step), and its cause
class is held to the class of the change the fault makes:

- a weight changed (``weights``), or an optimizer that updates it otherwise (the next step's ``weights``);
- a change to what the module computes: an argument, code, an operator, a precision, a scale, a mask, a module
  skipped or swapped (``computation``);
- other data given to the model (``inputs``).

Left out, and counted: faults outside every module, or only in the backward (replay runs a module's forward);
faults whose class their kind does not fix (a NaN or overflow at step 1, which may be a weight, a value or the
code; a tensor written in place after the module read it); and faults whose module call returns, in the dumps
themselves, the same output in both runs (the fault shows elsewhere: running statistics, a later step), where
there is nothing for replay to explain. Controls (which change no value) are replayed at the modules their
architecture's faults name, and must say ``none``.

Target: the cause class right on at least 95% of the faults scored, every control ``none``. ``--frozen`` runs
the diagnosis benchmark's frozen held-out set instead, which no rule here was fitted to.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
from bench_diagnosis import STEPS, train, train_with
from diagnosis_faults import FAULTS, FROZEN_HELD_OUT, Fault, build

from msprobe.core.replay import COMPUTATION, INPUTS, NONE, WEIGHTS
from msprobe.pytorch import seed_all
from msprobe.pytorch.replay import ReplayError, replay_module

CLASS_OF_KIND = {
    "weights": WEIGHTS,
    "optimizer": WEIGHTS,
    "data": INPUTS,
    **{kind: COMPUTATION for kind in ("argument", "code", "operator", "precision", "scale", "mask", "module",
                                      "swapped_op")},
}  # fmt: skip
# two architectures: a weight, an argument, a padding that changes the output's shape, data, and a control
QUICK = ("gpt.ln_f_bias", "gpt.gelu_tanh", "cnn.data", "cnn.conv1_padding", "gpt.control_same_backward")
TARGET = 0.95


def cases(only: set[str] | None, faults: list[Fault]) -> tuple[list[tuple[Fault, str, int]], list[Fault], Counter]:
    """(fault, expected class, step) for each fault scored; the controls; the faults left out, by reason."""
    scored, controls, left = [], [], Counter()
    for fault in faults:
        if fault.world != 1 or (only is not None and fault.name not in only):
            continue
        expect = fault.expect
        if expect is None:
            controls.append(fault)
        elif expect.module is None:
            left["outside every module"] += 1
        elif expect.phase in ("backward",) or fault.kind in ("backward", "gradient"):
            left["in the backward only"] += 1
        elif fault.kind not in CLASS_OF_KIND:
            left[f"class not fixed by its kind ({fault.kind})"] += 1
        else:
            step = expect.step + 1 if fault.kind == "optimizer" else expect.step
            if step < STEPS:
                scored.append((fault, CLASS_OF_KIND[fault.kind], step))
            else:
                left["after the last step dumped"] += 1
    return scored, controls, left


def replay_case(fault: Fault, step: int, module: str, root: Path, golden: Path):
    """The fault's run in tensor mode, then its module call replayed with the model as its script builds it."""
    folder = root / fault.name
    config = folder.parent / f"{folder.name}.json"
    config.write_text(
        json.dumps({"task": "tensor", "level": "mix", "dump_path": str(folder), "step": list(range(STEPS))})
    )
    train_with(fault, fault.arch, config)
    seed_all(1234, mode=True)
    setup = build(fault.arch)
    if fault.apply is not None:
        fault.apply(setup)
    return replay_module(setup.model, module, folder / f"step{step}" / "rank", golden / f"step{step}" / "rank")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="the subset the tests run")
    parser.add_argument("--only", help="comma-separated fault names")
    parser.add_argument("-v", "--verbose", action="store_true", help="one line per case")
    parser.add_argument("--frozen", action="store_true", help="the diagnosis's frozen held-out set instead")
    options = parser.parse_args()
    only = set(QUICK) if options.quick else set(options.only.split(",")) if options.only else None
    scored, controls, left = cases(only, list(FROZEN_HELD_OUT) if options.frozen else FAULTS)
    started = time.monotonic()
    right = wrong = quiet = loud = 0
    with tempfile.TemporaryDirectory() as temporary:
        root = Path(temporary)
        goldens: dict[str, Path] = {}

        def golden(arch: str) -> Path:
            if arch not in goldens:
                goldens[arch] = train(None, arch, "tensor", False, root / f"golden.{arch}")
            return goldens[arch]

        for fault, expected, step in scored:
            try:
                report = replay_case(fault, step, fault.expect.module, root, golden(fault.arch))
            except ReplayError as exc:
                found = f"error: {exc}"
            else:
                if report.baseline == 0.0:
                    left["the same output at its module call"] += 1
                    if options.verbose:
                        print(f"  left out: {fault.name} ({fault.kind}): the same output at {report.entry}")
                    continue
                found = report.cause
            ok = found == expected
            right, wrong = right + ok, wrong + (not ok)
            if options.verbose or not ok:
                print(f"  {'right' if ok else 'WRONG'}: {fault.name} ({fault.kind}): {found}, expected {expected}")
        modules = {fault.arch: fault.expect.module for fault, _, _ in reversed(scored)}
        for control in controls:
            module = modules.get(control.arch)
            if module is None:
                continue
            try:
                found = replay_case(control, 0, module, root, golden(control.arch)).cause
            except ReplayError as exc:
                found = f"error: {exc}"
            ok = found == NONE
            quiet, loud = quiet + ok, loud + (not ok)
            if options.verbose or not ok:
                print(f"  {'quiet' if ok else 'LOUD'}: {control.name} at {module}: {found}")
    total = right + wrong
    share = right / total if total else 0.0
    print(f"faults: cause class right on {right}/{total} ({share:.1%}); controls 'none': {quiet}/{quiet + loud}")
    print("left out: " + (", ".join(f"{reason}: {count}" for reason, count in sorted(left.items())) or "none"))
    met = share >= TARGET and loud == 0 and total > 0
    print(f"targets: cause class {TARGET:.0%}, every control 'none': {'met' if met else 'NOT met'}")
    print(f"{total + quiet + loud} cases scored, {time.monotonic() - started:.0f} s")
    return 0 if met else 1


if __name__ == "__main__":
    raise SystemExit(main())
