"""Hooks running on several threads at once (backward on a device's threads, a user's own threads): no entry is
lost, doubled or out of order within its thread, and the step is written whole, on each per-call path."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

SCRIPT = """
import json, sys, threading, torch
from msprobe.pytorch import PrecisionDebugger
out, calls = sys.argv[1], int(sys.argv[2])
debugger = PrecisionDebugger(task="statistics", level="L1", dump_path=out)
start = threading.Barrier(2)

def worker(op, size):
    start.wait()
    for i in range(calls):
        x = torch.full((size,), float(i), requires_grad=True)
        op(x, torch.ones(size)).sum().backward()

debugger.start()
threads = [threading.Thread(target=worker, args=(torch.add, 3)), threading.Thread(target=worker, args=(torch.mul, 5))]
for thread in threads:
    thread.start()
for thread in threads:
    thread.join()
debugger.stop()
debugger.step()
"""


@pytest.mark.parametrize("path", ["C fast path", "Python", "device batches"])
def test_two_threads_recording_at_once_lose_double_and_reorder_nothing(tmp_path, path):
    calls = 600
    env = dict(os.environ)
    env.update(
        {
            "C fast path": {},
            "Python": {"MSPROBE_NO_FAST_PATH": "1"},
            "device batches": {"MSPROBE_FORCE_DEVICE_PATH": "1"},
        }[path]
    )
    done = subprocess.run([sys.executable, "-c", SCRIPT, str(tmp_path), str(calls)], capture_output=True, text=True,
                          timeout=300, env=env)  # fmt: skip
    assert done.returncode == 0, done.stderr[-3000:]
    assert "failed" not in done.stderr, done.stderr[-3000:]
    data = json.loads((tmp_path / "step0" / "rank" / "dump.json").read_text())["data"]
    for op, size in (("add", 3), ("mul", 5)):
        forward = [data[f"Torch.{op}.{k}.forward"] for k in range(calls)]
        assert len([name for name in data if name.startswith(f"Torch.{op}.")]) == 2 * calls  # forward, backward
        # in its thread's order: the k-th call's input holds k, and its shape is the thread's own
        assert [entry["input_args"][0]["Max"] for entry in forward] == [float(k) for k in range(calls)]
        assert {tuple(entry["input_args"][0]["shape"]) for entry in forward} == {(size,)}
        backward = [data[f"Torch.{op}.{k}.backward"] for k in range(calls)]
        assert all(entry["input"][0]["shape"] == [size] for entry in backward)
