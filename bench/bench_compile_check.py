"""compile_check on injected compiler faults: each wrong decomposition of bench/compile_faults.py, in each model
and backend where it moves the output, must be named at its op's first FX node and, on Inductor, at the kernel
whose generated code holds it (which, replayed alone, must depart too); each model compiled without a fault must
show none.

    python bench/bench_compile_check.py [--models block,cnn,...] [--backends aot_eager,inductor] [--device cuda]
                                        [--no-backward]
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
    parser.add_argument("--device", default="cpu", help="cuda: Inductor's Triton kernels")
    parser.add_argument("--no-backward", action="store_true", help="the forward's faults only")
    args = parser.parse_args()
    models, backends = args.models.split(","), args.backends.split(",")
    began = time.perf_counter()
    result = compile_faults.score(models, backends, not args.no_backward, args.device)
    print(f"{'model':10} {'backend':10} {'fault':11} {'named node':24} {'its op':11} {'node':5} {'kernel':6} "
          f"{'replay':6} kernels named")  # fmt: skip
    for case in result.cases:
        words = {True: "yes", False: "NO", None: "-"}
        print(f"{case.model:10} {case.backend:10} {case.fault:11} {case.node or '-':24} {case.op or '-':11} "
              f"{words[case.node_right]:5} {words[case.kernel_right]:6} {words[case.replay_departs]:6} "
              f"{case.kernel or '-'}")  # fmt: skip
    print("live faults named at their op's first node: {}/{}".format(*result.count("node_right")))
    print("Inductor faults named at the kernel whose code holds them: {}/{}".format(*result.count("kernel_right")))
    print("those kernels departing when replayed alone: {}/{}".format(*result.count("replay_departs")))
    print(f"clean runs flagged (negative controls): {result.clean_flagged}/{result.controls}")
    print(f"{time.perf_counter() - began:.0f} s")


if __name__ == "__main__":
    main()
