"""Synthetic statistics dumps of many ranks and steps, as the dump writes them (step{S}/rank{R}/dump.json,
stack.json, construct.json), for the scale benchmark and the store and engine tests.

Every value is a closed-form function of (step, rank, call, position), so a
test can say what any row must hold without reading the files back; one
tensor can be made non-finite from a chosen (step, rank) on.
"""

from __future__ import annotations

import json
import math
from pathlib import Path

APIS = ("linear", "gelu", "linear", "layer_norm", "softmax", "matmul")
SPIKE = 1000.0


def api_name(call: int) -> str:
    return f"Functional.{APIS[call % len(APIS)]}.{call}.forward"


def value(step: int, rank: int, call: int, position: int) -> float:
    """The norm of a tensor: smooth in the step, a little different per rank."""
    return round(1.0 + 0.1 * call + 0.01 * position + 0.001 * rank + 0.0001 * step, 9)


def _stat(norm: float, shape: list[int]) -> dict:
    return {
        "type": "torch.Tensor",
        "dtype": "torch.float32",
        "shape": shape,
        "Max": norm / 2,
        "Min": -norm / 2,
        "Mean": norm / 100,
        "Norm": norm,
        "requires_grad": False,
    }


def write_rank(
    root: Path,
    step: int,
    rank: int,
    calls: int,
    bad: tuple[int, int, int] | None = None,
    drift: float = 1.0,
    spike: tuple[int, int, int] | None = None,
) -> Path:
    """One step/rank dump of ``calls`` API calls (in modules ``layers.{call // 4}``); ``bad`` = (step, rank, call):
    that call's output is inf from that step on, on that rank; ``spike``: that call's output is 1000 times larger
    at that step and rank only. ``drift`` scales every output (a second run)."""
    folder = root / f"step{step}" / f"rank{rank}"
    folder.mkdir(parents=True, exist_ok=True)
    data, construct, stack = {}, {}, {}
    for call in range(calls):
        module = f"Module.layers.{call // 4}.Block.forward.0"
        construct.setdefault(module, None)
        name = api_name(call)
        out = value(step, rank, call, 1) * drift
        if bad is not None and call == bad[2] and rank == bad[1] and step >= bad[0]:
            out = math.inf
        if spike is not None and (step, rank, call) == spike:
            out *= SPIKE
        data[name] = {
            "input_args": [_stat(value(step, rank, call, 0), [8, 64])],
            "input_kwargs": {},
            "output": [_stat(out, [8, 64])],
        }
        construct[name] = module
        stack[name] = [f"File model.py, line {10 + call % len(APIS)}, in forward, \n y = F.{APIS[call % len(APIS)]}(x)"]
    header = {"task": "statistics", "level": "mix", "framework": "pytorch", "dump_data_dir": None}
    text = json.dumps({**header, "data": data})
    (folder / "dump.json").write_text(text)  # inf as the token Infinity, as the reference writes it
    (folder / "construct.json").write_text(json.dumps(construct))
    (folder / "stack.json").write_text(json.dumps(stack))
    return folder


def write_run(
    root: Path,
    ranks: int,
    steps: int,
    calls: int,
    bad: tuple[int, int, int] | None = None,
    drift: float = 1.0,
    spike: tuple[int, int, int] | None = None,
) -> Path:
    for step in range(steps):
        for rank in range(ranks):
            write_rank(root, step, rank, calls, bad, drift, spike)
    return root
