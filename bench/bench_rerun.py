"""Transient or persistent, scored on injected faults: ``python bench/bench_rerun.py``.

Each case of transient_faults.py trains six steps under a StepGuard with its fault at step 4. Right:

- a fault: a first verdict at step 4, of the fault's kind (and for a transient fault no other), naming its
  call: for a transient fault the flipped call (operator, occurrence, module); for a persistent one the first
  call that made an inf or nan (operator and module), or no call when nothing non-finite was made;
- a control: no verdict.

Target: at least 95% of the faults right, every control.
"""

from __future__ import annotations

import argparse
import contextlib
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from transient_faults import CASES, FAULT_STEP, HELD_OUT, Case, FlipOnce, batches, model_and_optimizer, step_function

from msprobe.core.rerun import Verdict
from msprobe.pytorch.rerun import StepGuard

TARGETS = {"faults": 0.95, "controls": 1.0}


def run_case(case: Case) -> list[Verdict]:
    model, optimizer = model_and_optimizer(case)
    guard = StepGuard(model, optimizer)
    step = step_function(model, optimizer)
    for index, batch in enumerate(batches(case)):
        fault = FlipOnce(*case.flip) if case.flip is not None and index == FAULT_STEP else contextlib.nullcontext()
        with fault:
            guard.run(step, batch)
    return guard.verdicts


def right(case: Case, verdicts: list[Verdict]) -> bool:
    if case.kind is None:
        return not verdicts
    if not verdicts or verdicts[0].step != FAULT_STEP or verdicts[0].kind != case.kind:
        return False
    # a transient fault is gone once its step is run again; a persistent one may have left the weights non-finite,
    # and then each later step fires too
    if case.kind == "transient" and len(verdicts) != 1:
        return False
    call = verdicts[0].call
    if case.call is None:
        return call is None
    if call is None:
        return False
    name, occurrence, module = case.call
    if case.kind == "transient":
        return (call.name, call.occurrence, call.module) == (name, occurrence, module)
    return (call.name, call.module) == (name, module)  # a bug's occurrence is not fixed by its injection


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--case", action="append", help="only these cases (by name)")
    parser.add_argument("--held-out", action="store_true", help="the held-out cases instead, never fitted to")
    arguments = parser.parse_args()
    pool = HELD_OUT if arguments.held_out else CASES
    cases = [case for case in pool if not arguments.case or case.name in arguments.case]
    started = time.perf_counter()
    faults = controls = faults_right = controls_right = 0
    for case in cases:
        verdicts = run_case(case)
        ok = right(case, verdicts)
        said = verdicts[0].line() if verdicts else "no verdict (the rule did not fire)"
        print(f"{case.name:<22} {'right' if ok else 'WRONG'}  {said}")
        if case.kind is None:
            controls, controls_right = controls + 1, controls_right + ok
        else:
            faults, faults_right = faults + 1, faults_right + ok
    met = (faults == 0 or faults_right / faults >= TARGETS["faults"]) and (
        controls == 0 or controls_right / controls >= TARGETS["controls"]
    )
    print(
        f"faults right {faults_right}/{faults}, controls right {controls_right}/{controls}; targets: faults 95%, "
        f"controls 100%: {'met' if met else 'NOT met'}; {len(cases)} cases, {time.perf_counter() - started:.0f} s"
    )
    return 0 if met else 1


if __name__ == "__main__":
    raise SystemExit(main())
