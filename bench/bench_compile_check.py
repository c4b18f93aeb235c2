"""compile_check on injected compiler faults: each wrong decomposition of bench/compile_faults.py, in each model
and backend where it moves the output, must be named at its op's first FX node; each model compiled without a
fault must show none.

    python bench/bench_compile_check.py [--models block,cnn,...] [--backends aot_eager,inductor]
"""

from __future__ import annotations

import argparse
import time

import compile_faults

MODELS = ["block", "cnn", "attention", "gpt2", "bert", "vit", "llama"]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", default=",".join(MODELS))
    parser.add_argument("--backends", default="aot_eager,inductor")
    args = parser.parse_args()
    models, backends = args.models.split(","), args.backends.split(",")
    began = time.perf_counter()
    rows, right, cases, false = compile_faults.score(models, backends)
    print(f"{'model':10} {'backend':10} {'fault':11} {'named node':28} {'its op':12} right")
    for model, backend, fault, node, op, named in rows:
        print(f"{model:10} {backend:10} {fault:11} {node or '-':28} {op or '-':12} {'yes' if named else 'NO'}")
    print(f"live faults named at their op's first node: {right}/{cases}")
    print(f"clean runs flagged (negative controls): {false}/{len(models) * len(backends)}")
    print(f"{time.perf_counter() - began:.0f} s")


if __name__ == "__main__":
    main()
