"""What starting and stopping the dump every step does to attribute lookups on a patched class.

The dump wraps a class's methods at ``start()`` and puts them back at
``stop()`` (torch.Tensor's, on PyTorch). Each change gives the class a new
version in CPython's attribute cache; CPython 3.13 and later give a class at
most 1,000 of them, and a class past that is looked up without the cache for
the rest of the process. This script patches a class shaped like
torch.Tensor (a subclass whose methods live in its base) with msprobe's own
ApiPatcher, ``--cycles`` times with lookups in between, as a training loop
does, and prints the lookup time of an instance's attributes before and
after, and their ratio.

    python bench/bench_type_versions.py --cycles 600
"""

from __future__ import annotations

import argparse
import sys
import time

from msprobe.core.api_patch import ApiPatcher

METHODS = [f"method_{i}" for i in range(40)]


def make_classes() -> tuple[type, type]:
    base = type("TensorBase", (), {name: (lambda self: None) for name in METHODS})
    return base, type("Tensor", (base,), {})


def make_patcher(owner: type) -> ApiPatcher:
    """msprobe's patcher over every method of ``owner``, passing each call straight through."""
    return ApiPatcher(
        lambda original, _key, call_args, call_kwargs: original(*call_args, **call_kwargs),
        lambda: [(owner, name, name) for name in METHODS],
    )


def lookup_seconds(instance: object, rounds: int = 200_000) -> float:
    """The best of five timings of ``rounds`` lookups of four of the instance's methods, written as attribute
    reads (what CPython specializes while the class has a version)."""
    best = float("inf")
    for _ in range(5):
        start = time.perf_counter()
        for _ in range(rounds):
            _ = instance.method_0, instance.method_1, instance.method_2, instance.method_3
        best = min(best, time.perf_counter() - start)
    return best


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--cycles", type=int, default=600, help="start/stop cycles (CPython 3.13: 500 spend 1,000)")
    args = parser.parse_args()
    _base, tensor_class = make_classes()
    instance = tensor_class()
    patcher = make_patcher(tensor_class)
    before = lookup_seconds(instance)
    for _ in range(args.cycles):
        patcher.install()
        _ = instance.method_0  # a lookup while patched gives the class its next version, as a training step does
        patcher.remove()
        _ = instance.method_0
    after = lookup_seconds(instance)
    print(f"Python {sys.version.split()[0]}: {args.cycles} start/stop cycles; lookups {before * 1e3:.1f} ms "
          f"before, {after * 1e3:.1f} ms after: {after / before:.2f}x")  # fmt: skip


if __name__ == "__main__":
    main()
