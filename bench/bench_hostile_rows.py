"""The compare's row reader on entries forged to be slow: its time must grow with the input, not faster.

    python bench/bench_hostile_rows.py [--largest 80000]

Writes dump.json files whose one entry has an ``input_kwargs`` of n keys (n doubling up to ``--largest``) and
reads their compare rows as a streamed compare does, with the C row reader and without it. Prints the seconds
per thousand keys at each size and the ratio of the largest size's rate to the smallest's: about 1 for a
linear reader (a quadratic one doubles it at every step, so 16x over five sizes).
"""

from __future__ import annotations

import argparse
import json
import tempfile
import time
from pathlib import Path

from msprobe.core.compare import rows, stream

TENSOR = {"type": "torch.Tensor", "dtype": "torch.float32", "shape": [2], "Max": 1.5, "Min": -0.5, "Mean": 0.25,
          "Norm": 2.0}  # fmt: skip


def _write(folder: Path, keys: int) -> Path:
    path = folder / f"dump_{keys}.json"
    kwargs = {f"key{index}": TENSOR for index in range(keys)}
    path.write_text(
        json.dumps({"task": "statistics", "level": "L1", "data": {"Torch.f.0.forward": {"input_kwargs": kwargs}}})
    )
    return path


def _seconds(path: Path) -> float:
    began = time.perf_counter()
    found, _, _ = stream._bench_rows(path, None, lambda parsed: None)
    elapsed = time.perf_counter() - began
    assert len(found) == int(path.stem.split("_")[1])
    return elapsed


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--largest", type=int, default=80_000)
    largest = parser.parse_args().largest
    sizes = [largest >> shift for shift in range(4, -1, -1)]
    c_reader = rows.c_rows
    with tempfile.TemporaryDirectory() as folder:
        paths = [_write(Path(folder), keys) for keys in sizes]
        for label, reader in (("C row reader", c_reader), ("Python path", None)):
            if label.startswith("C") and reader is None:
                print("C row reader: not built here")
                continue
            rows.c_rows = reader
            _seconds(paths[0])  # imports and first allocations out of the figures
            rates = [_seconds(path) / keys * 1000 for path, keys in zip(paths, sizes)]
            cells = "  ".join(f"{keys}: {rate * 1000:.2f} ms" for keys, rate in zip(sizes, rates))
            print(f"{label:13s} per 1000 keys  {cells}  largest/smallest {rates[-1] / rates[0]:.2f}x")
    rows.c_rows = c_reader


if __name__ == "__main__":
    main()
