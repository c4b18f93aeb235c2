"""Precision bisection, scored on injected precision-sensitive modules: ``python bench/bench_bisect.py``.

Each case of precision_faults.py is bisected in its dtype and mode (every leaf module a candidate, the default
tolerance) and scored right when the minimal set is exactly the modules its arithmetic needs in float32, or,
for a control, when nothing is needed. Target: at least 90% of the faults right, and every control.
"""

from __future__ import annotations

import argparse
import math
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from precision_faults import CASES, HELD_OUT, Case, inputs

from msprobe.pytorch.bisect import bisect_precision

TARGETS = {"faults": 0.9, "controls": 1.0}


def run_case(case: Case):
    return bisect_precision(case.build(), (inputs(case.padded),), dtype=case.dtype, mode=case.mode)


def right(case: Case, minimal: list[str]) -> bool:
    return set(minimal) == set(case.expected)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--case", action="append", help="only these cases (by name)")
    parser.add_argument("-v", "--verbose", action="store_true", help="each case's sensitivity table")
    parser.add_argument("--held-out", action="store_true", help="the held-out cases instead, never fitted to")
    arguments = parser.parse_args()
    pool = HELD_OUT if arguments.held_out else CASES
    cases = [case for case in pool if not arguments.case or case.name in arguments.case]
    started = time.perf_counter()
    scores: list[tuple[Case, bool, int]] = []
    print(f"{'case':<34} {'expected':<28} {'found':<28} {'runs':>4}  ")
    for case in cases:
        result = run_case(case)
        ok = right(case, result.minimal)
        scores.append((case, ok, len(result.runs)))
        expected = ", ".join(case.expected) or "(nothing)"
        found = ", ".join(result.minimal) or f"({result.outcome})"
        print(f"{case.name:<34} {expected:<28} {found:<28} {len(result.runs):>4}  {'right' if ok else 'WRONG'}")
        if arguments.verbose or not ok:
            print("    " + result.table().replace("\n", "\n    "))
    faults = [(c, ok, n) for c, ok, n in scores if not c.control]
    controls = [(c, ok, n) for c, ok, n in scores if c.control]
    share = {
        "faults": sum(ok for _, ok, _ in faults) / max(1, len(faults)),
        "controls": sum(ok for _, ok, _ in controls) / max(1, len(controls)),
    }
    met = all(share[key] >= TARGETS[key] for key in TARGETS if (faults if key == "faults" else controls))
    candidates = max((len(c.build().order) + 5 for c, _, _ in faults), default=1)
    runs = [n for _, _, n in faults]
    print(
        f"faults right {sum(ok for _, ok, _ in faults)}/{len(faults)}, controls right "
        f"{sum(ok for _, ok, _ in controls)}/{len(controls)}; targets: faults 90%, controls 100%: "
        + ("met" if met else "NOT met")
    )
    if runs:
        print(
            f"runs per fault case: {min(runs)} to {max(runs)} (up to {candidates} candidates: the sensitivity "
            f"table takes one each; the search alone about log2 = {math.log2(candidates):.1f} per needed module)"
        )
    print(f"{len(cases)} cases, {time.perf_counter() - started:.0f} s")
    return 0 if met else 1


if __name__ == "__main__":
    raise SystemExit(main())
