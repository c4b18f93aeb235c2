"""The line at the end of a run: where the dump went and what it holds, or why nothing was written."""

from __future__ import annotations

import json
import logging
import os

import pytest
import torch

from msprobe.pytorch import PrecisionDebugger


def _run(debugger: PrecisionDebugger, steps: int = 2, start: bool = True) -> None:
    for _ in range(steps):
        if start:
            debugger.start()
        torch.ones(3) * 2
        torch.relu(torch.ones(2))
        if start:
            debugger.stop()
        debugger.step()
    debugger.finish()


def _said(caplog) -> list[str]:
    return [r.getMessage() for r in caplog.records if r.name.startswith("msprobe")]


def test_a_dump_ends_with_where_it_went_and_what_it_holds(tmp_path, caplog):
    caplog.set_level(logging.INFO, logger="msprobe")
    _run(PrecisionDebugger(task="statistics", level="L1", dump_path=str(tmp_path / "d")))
    entries = sum(len(json.loads(p.read_text())["data"]) for p in (tmp_path / "d").rglob("dump.json"))
    # the tool's hidden working file (a journal kept ready for a next step) is not part of the dump
    walked = os.walk(tmp_path / "d")
    files = [os.path.join(root, name) for root, _, names in walked for name in names if not name.startswith(".")]
    size = sum(os.path.getsize(f) for f in files)
    [line] = [m for m in _said(caplog) if "the dump is in" in m]
    assert line == (f"msprobe: the dump is in {tmp_path / 'd'}: 2 steps, {entries:,} entries, {len(files)} files, "
                    f"{size / 1000:.1f} KB")  # fmt: skip
    assert entries == 4 and len(files) == 6


@pytest.mark.parametrize(
    ("arguments", "config", "start", "reason"),
    [
        ({}, {"rank": [1]}, True, "this process is rank 0, and the config's rank list is [1]"),
        ({"step": [5, 7]}, {}, True, "the config's steps [5, 7] were never reached (the run ended in step 2)"),
        ({}, {"statistics": {"list": ["conv2d"]}}, True, "list ['conv2d'] matched no call"),
        ({}, {}, False, "start() was never called"),
    ],
    ids=["rank", "step", "list", "no-start"],
)
def test_a_run_that_dumps_nothing_says_why(tmp_path, caplog, arguments, config, start, reason):
    (tmp_path / "c.json").write_text(json.dumps({"task": "statistics", "level": "L1", **config}))
    debugger = PrecisionDebugger(config_path=str(tmp_path / "c.json"), dump_path=str(tmp_path / "d"), **arguments)
    _run(debugger, start=start)
    [line] = [m for m in _said(caplog) if "nothing was dumped" in m]
    assert reason in line
    assert not list((tmp_path / "d").rglob("dump.json")) or "list" in reason


def test_grad_probe_without_monitor_says_so_at_the_first_start_and_at_the_end(tmp_path, caplog):
    debugger = PrecisionDebugger(task="grad_probe", dump_path=str(tmp_path / "d"))
    _run(debugger)
    said = _said(caplog)
    assert sum("monitor(model)" in m and "start()" in m for m in said) == 1  # once, not per step
    assert any("grad_probe wrote nothing" in m for m in said)


def test_the_first_dumped_step_says_what_it_cost(tmp_path, caplog):
    """Step 0 runs without the dump, step 1 with it: the line gives step 1's entries and bytes on disk, its
    time, and that time beside step 0's."""
    caplog.set_level(logging.INFO, logger="msprobe")
    _run(PrecisionDebugger(task="statistics", level="L1", dump_path=str(tmp_path / "d"), step=[1]), steps=3)
    folder = tmp_path / "d" / "step1" / "rank"
    entries = len(json.loads((folder / "dump.json").read_text())["data"])
    size = sum(p.stat().st_size for p in folder.iterdir() if not p.name.startswith("."))
    [line] = [m for m in _said(caplog) if "dumped on" in m]
    assert line.startswith(
        f"msprobe: step 1 dumped on this process: {entries} entries, {size / 1000:.1f} KB in 3 files, "
    )
    assert "x a step without the dump" in line and line.endswith(
        f"each dumped step writes {size / 1000:.1f} KB per rank"
    )
