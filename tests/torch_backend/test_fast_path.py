"""The per-call path in C (msprobe/pytorch/dump/_fast_path.c) writes exactly what the Python recorder writes.

Each test runs the same thing twice, with the fast path and without it
(``fast_path.AVAILABLE`` off), and compares the files value for value.
"""

from __future__ import annotations

import json
import logging
import math
import sys
from pathlib import Path

import pytest
import torch
import torch.nn.functional as F

from models import MixedNet, train_beside_a_failing_tool, train_mixed_net
from msprobe.core.dump.pending_values import PLACEHOLDERS
from msprobe.core.dump.writer import DumpWriter
from msprobe.pytorch import PrecisionDebugger
from msprobe.pytorch.dump import device_batch, fast_path


def test_the_fast_path_is_built():
    """pip compiled it with msprobe-torch (a missing compiler would leave every call to Python)."""
    assert fast_path.AVAILABLE


class LaneCount:
    """How many entries the Python path wrote: DumpWriter.add_encoded is its only way to the writer (the fast path's
    entries go in from C)."""

    def __init__(self, monkeypatch):
        self.python_entries = 0
        original = DumpWriter.add_encoded

        def counted(writer, *args):
            self.python_entries += 1
            return original(writer, *args)

        monkeypatch.setattr(DumpWriter, "add_encoded", counted)


def read_dump(root: Path) -> dict:
    """Every file of every step and rank folder: JSON parsed, tensor files loaded."""
    found = {}
    for path in sorted(root.rglob("*")):
        if path.suffix == ".json":
            found[str(path.relative_to(root))] = json.loads(path.read_text())
        elif path.suffix == ".pt":
            found[str(path.relative_to(root))] = torch.load(path, weights_only=True)
    return found


def assert_same_dump(left: dict, right: dict) -> None:
    assert left.keys() == right.keys()
    for name, value in left.items():
        if isinstance(value, torch.Tensor):
            assert torch.equal(value, right[name]), name
        elif name.endswith("dump.json"):
            assert list(value["data"]) == list(right[name]["data"]), name  # the same entries in the same order
            for entry, fields in value["data"].items():
                assert fields == right[name]["data"][entry], (name, entry)
            header = {k: v for k, v in value.items() if k not in ("data", "dump_data_dir")}  # dir: the run's own
            assert header == {k: v for k, v in right[name].items() if k not in ("data", "dump_data_dir")}
        else:
            assert value == right[name], name


CONFIGS = {
    "statistics L1": {"task": "statistics", "level": "L1"},
    "statistics mix": {"task": "statistics", "level": "mix"},
    "statistics L0": {"task": "statistics", "level": "L0"},
    "tensor mix": {"task": "tensor", "level": "mix"},
    "md5 L1": {"task": "statistics", "level": "L1", "statistics": {"summary_mode": "md5"}},
    "tensor L1": {"task": "tensor", "level": "L1"},
    "structure mix": {"task": "structure", "level": "mix"},
}


def _config_args(folder: Path, config: dict) -> dict:
    folder.mkdir(parents=True)
    (folder / "config.json").write_text(json.dumps({**config, "dump_path": str(folder / "dump")}))
    return {"config_path": str(folder / "config.json")}


def _dump_mixed_net(folder: Path, config: dict, monkeypatch, with_fast_path: bool) -> tuple[dict, LaneCount, list]:
    monkeypatch.setattr(fast_path, "AVAILABLE", with_fast_path)
    count = LaneCount(monkeypatch)
    arguments = _config_args(folder, config)
    _, losses = train_mixed_net(lambda model: PrecisionDebugger(**arguments, model=model))
    monkeypatch.undo()
    return read_dump(folder / "dump"), count, losses


@pytest.mark.parametrize("label", list(CONFIGS))
def test_the_fast_path_writes_what_the_python_recorder_writes(tmp_path, monkeypatch, label):
    # both from one line: the stacks in stack.json end at this test's call
    runs = [_dump_mixed_net(tmp_path / str(on), CONFIGS[label], monkeypatch, on) for on in (True, False)]
    (fast, fast_count, fast_losses), (slow, slow_count, slow_losses) = runs
    assert_same_dump(fast, slow)
    assert all(torch.equal(a, b) for a, b in zip(fast_losses, slow_losses))
    data = fast["step0/rank/dump.json"]["data"]
    assert fast_count.python_entries == 0 and slow_count.python_entries > 0  # every entry took the fast path, or none
    if CONFIGS[label]["level"] == "L0":
        assert all(name.startswith("Module.") for name in data) and "Module.fc.Linear.parameters_grad" in data
    else:  # the optimizer's in-place updates among them: AdamW's eight per parameter, 12 parameters
        assert "Tensor.addcdiv_.0.forward" in data and "Tensor.lerp_.11.forward" in data


@pytest.mark.parametrize(
    "config",
    [
        {"statistics": {"list": ["addcdiv"]}},
        {"statistics": {"scope": ["Tensor.mul_.0.forward", "Tensor.mul_.3.forward"]}},
        {"statistics": {"data_mode": ["forward", "output"]}},
        {"async_dump": True},
    ],
)
def test_runs_the_fast_path_cannot_write_exactly_go_the_python_way(tmp_path, config):
    (tmp_path / "c.json").write_text(
        json.dumps({"task": "statistics", "level": "L1", "dump_path": str(tmp_path / "d"), **config})
    )
    debugger = PrecisionDebugger(config_path=str(tmp_path / "c.json"), model=torch.nn.Linear(2, 2))
    debugger.start()
    try:
        assert debugger._hooks.fast_path is None
    finally:
        debugger.stop()


class Opaque:
    """A value nothing knows how to encode: the general way names its type."""


class Pair(tuple):
    """A tuple subclass (like torch.return_types and torch.Size): the general way decides."""


def _values() -> tuple[tuple, dict]:
    torch.manual_seed(3)
    plain = torch.randn(4, 6)
    with torch.inference_mode():
        inference = torch.ones(3)
    sparse = torch.sparse_coo_tensor([[0, 2]], [1.5, -2.0], (4,))
    args = (
        plain,
        plain.t(),  # permuted: fills its block
        plain[:, 1:3],  # a slice of columns: does not
        torch._neg_view(plain),
        torch.tensor(2.5),  # 0-d
        torch.empty(0, 3),
        torch.tensor([1.0, float("inf"), -2.0]),
        torch.tensor([float("nan"), 1.0]),
        torch.arange(6).reshape(2, 3),
        plain > 0,
        plain.double(),
        plain.half(),
        torch.nn.Parameter(torch.ones(2, 2)),
        inference,
        sparse,
        None,
        True,
        False,
        7,
        -(2**70),
        0.1,
        1e-05,
        float("inf"),
        float("nan"),
        'text with "quotes", a \\ backslash,\nnew line, tab\t, \x01 and unicode é中',
        [1, [2.5, plain], (None, "x")],
        (),
        [],
        {"nested": [1, 2], "tensor": plain},
        slice(1, None, 2),
        Ellipsis,
        torch.float16,
        torch.device("cpu"),
        torch.Size([2, 3]),
        Pair((1, plain)),
        Opaque(),
    )
    kwargs = {"alpha": 2, "weight": plain, "name": "é", "flag": None, "inplace": False}
    return args, kwargs


def record_call(folder: Path, with_fast_path: bool, args: tuple, kwargs: dict, output) -> dict:
    """One call of the recorder's API handler, under no_grad, through the fast path or the Python recorder; the
    call must get its very arguments and return its own result. Returns the call's entry."""
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(fast_path, "AVAILABLE", with_fast_path)
        debugger = PrecisionDebugger(task="statistics", level="L1", dump_path=str(folder))
        debugger.start()
        recorder = debugger._hooks
        assert (recorder.fast_path is not None) == with_fast_path
        seen = []

        def original(*call_args, **call_kwargs):
            seen.append((call_args, call_kwargs))
            return output

        with torch.no_grad():
            result = recorder.patcher.handler(original, "Torch.fake", args, kwargs)
        debugger.stop()
        debugger.step()
    assert result is output and len(seen) == 1  # called once, with the very same values
    assert len(seen[0][0]) == len(args) and all(a is b for a, b in zip(seen[0][0], args))
    assert seen[0][1].keys() == kwargs.keys() and all(seen[0][1][k] is v for k, v in kwargs.items())
    return json.loads((folder / "step0" / "rank" / "dump.json").read_text())["data"]["Torch.fake.0.forward"]


def _record(tmp_path: Path, with_fast_path: bool, output) -> dict:
    """Every kind of value in and out."""
    return record_call(tmp_path, with_fast_path, *_values(), output)


@pytest.mark.parametrize(
    "output",
    [
        torch.ones(3),
        (torch.ones(2), None, 3),
        [torch.zeros(1), 2.5],
        torch.return_types.max((torch.ones(2), torch.zeros(2, dtype=torch.long))),
        torch.Size([4]),
        None,
        "out",
    ],
    ids=["tensor", "tuple", "list", "return_types", "Size", "None", "str"],
)
def test_every_kind_of_value_is_encoded_as_the_python_recorder_encodes_it(tmp_path, monkeypatch, output):
    by_fast_path, by_python = [_record(tmp_path / str(on), on, output) for on in (True, False)]
    assert list(by_fast_path) == ["input_args", "input_kwargs", "is_recompute", "output"]
    assert by_fast_path == by_python
    assert by_fast_path["input_args"][24]["value"] == _values()[0][24]  # the text came through whole
    assert by_fast_path["input_args"][19] == {"type": "int", "value": -(2**70)}


def test_a_call_needing_a_backward_record_gets_it_from_the_recorder_s_node_hook(tmp_path, monkeypatch):
    """The fast path writes the forward entry; the backward entry comes from the hook on the output's autograd node."""
    debugger = PrecisionDebugger(task="statistics", level="L1", dump_path=str(tmp_path))
    count = LaneCount(monkeypatch)
    weight = torch.ones(3, requires_grad=True)
    debugger.start()
    try:
        out = weight * 2  # a forward entry and, when backward runs, a backward one
        with torch.no_grad():
            weight.mul_(0.5)  # no gradient to follow
        out.sum().backward()
    finally:
        debugger.stop()
    debugger.step()
    assert count.python_entries == 0  # every entry from the fast path, forward and backward
    data = json.loads((tmp_path / "step0" / "rank" / "dump.json").read_text())["data"]
    assert list(data) == [
        "Tensor.__mul__.0.forward",
        "Tensor.mul_.0.forward",
        "Tensor.sum.0.forward",
        "Torch.ones_like.0.forward",
        "Tensor.sum.0.backward",
        "Tensor.__mul__.0.backward",
    ]
    assert data["Tensor.__mul__.0.backward"]["output"][0]["Max"] == 2.0  # d(2w)/dw
    # the in-place call's input as it was before the call, its output after
    assert data["Tensor.mul_.0.forward"]["input_args"][0]["Max"] == 1.0
    assert data["Tensor.mul_.0.forward"]["output"][0]["Max"] == 0.5


def test_the_statistics_cache_sees_the_fast_path_s_writes(tmp_path):
    """An in-place call through the fast path makes every cached summary of that memory stale, under any alias."""
    debugger = PrecisionDebugger(task="statistics", level="L1", dump_path=str(tmp_path))
    base = torch.arange(8, dtype=torch.float32)
    alias = base.view(2, 4)
    debugger.start()
    with torch.no_grad():
        torch.abs(alias)  # alias measured and cached
        base.view(8)[:2].zero_()  # through a fresh alias the cache never saw; zero_ is only watched
        torch.abs(alias)
        base.mul_(2)  # recorded by the fast path: alias is stale too
        torch.abs(alias)
    debugger.stop()
    debugger.step()
    data = json.loads((tmp_path / "step0" / "rank" / "dump.json").read_text())["data"]
    seen = [data[f"Torch.abs.{i}.forward"]["input_args"][0]["Mean"] for i in range(3)]
    assert seen == [3.5, 3.375, 6.75]


def test_a_failure_inside_the_fast_path_is_logged_once_and_training_goes_on(tmp_path, monkeypatch, caplog):
    """Making the backward records of Functional.linear fails: their backward entries are lost, reported once per
    API; their forward entries, every other entry and the training are as without the failure."""
    from msprobe.pytorch.dump.recorder import TorchDumpRecorder

    original = TorchDumpRecorder.watch_backward

    def failing(recorder, name, *args):
        if name.startswith("Functional.linear"):
            raise ValueError("simulated failure")
        return original(recorder, name, *args)

    monkeypatch.setattr(TorchDumpRecorder, "watch_backward", failing)
    failures = train_beside_a_failing_tool(tmp_path, caplog)
    assert any("Functional.linear" in message for message in failures)
    data = json.loads((tmp_path / "step1" / "rank" / "dump.json").read_text())["data"]
    linear = [name for name in data if name.startswith("Functional.linear.")]
    assert linear and all(name.endswith(".forward") for name in linear)
    assert "Functional.layer_norm.0.backward" in data and "Tensor.addcdiv_.0.forward" in data


def _fail_to_encode_dtypes(monkeypatch) -> None:
    """The Python encoder, which the fast path asks for a torch.dtype, fails on one."""
    from msprobe.core.dump.values import ValueEncoder

    original = ValueEncoder.encode

    def failing(self, value, suffix):
        if isinstance(value, torch.dtype):
            raise ValueError("simulated failure")
        return original(self, value, suffix)

    monkeypatch.setattr(ValueEncoder, "encode", failing)


def test_a_value_that_fails_to_encode_costs_its_entry_not_the_call(tmp_path, monkeypatch, caplog):
    _fail_to_encode_dtypes(monkeypatch)
    debugger = PrecisionDebugger(task="statistics", level="L1", dump_path=str(tmp_path))
    debugger.start()
    try:
        assert debugger._hooks.fast_path is not None
        with torch.no_grad():
            wide = torch.full((2,), 1.0, dtype=torch.float64)  # the dtype goes the general way, which fails
            torch.ones(2).add_(1)
    finally:
        debugger.stop()
    debugger.step()
    assert wide.dtype == torch.float64 and wide.tolist() == [1.0, 1.0]
    assert [r.getMessage() for r in caplog.records if "simulated failure" in r.getMessage()]
    data = json.loads((tmp_path / "step0" / "rank" / "dump.json").read_text())["data"]
    assert "Tensor.add_.0.forward" in data and not any(name.startswith("Torch.full.") for name in data)


def test_strict_raises_from_the_fast_path(tmp_path, monkeypatch):
    from msprobe.core.dump.values import ValueEncoder

    def failing(self, value, suffix):
        raise ValueError("simulated failure")

    monkeypatch.setattr(ValueEncoder, "encode", failing)
    debugger = PrecisionDebugger(task="statistics", level="L1", dump_path=str(tmp_path), strict=True)
    debugger.start()
    try:
        assert debugger._hooks.fast_path is not None
        with torch.no_grad(), pytest.raises(ValueError, match="simulated failure"):
            torch.full((2,), 1.0, dtype=torch.float64)  # the dtype goes the general way, which fails
    finally:
        debugger.stop()
    assert torch.ones(2).add_(1).tolist() == [2.0, 2.0]  # nothing of the tool left in the way


def test_an_exception_of_the_call_itself_reaches_the_caller_unchanged(tmp_path):
    debugger = PrecisionDebugger(task="statistics", level="L1", dump_path=str(tmp_path))
    debugger.start()
    try:
        with torch.no_grad(), pytest.raises(RuntimeError, match="size"):
            torch.ones(2).add_(torch.ones(3))
        with torch.no_grad():
            torch.ones(2).add_(1)  # the next call is recorded as usual
    finally:
        debugger.stop()
    debugger.step()
    data = json.loads((tmp_path / "step0" / "rank" / "dump.json").read_text())["data"]
    assert list(data) == ["Tensor.add_.1.forward"]  # the call that raised has no entry, but counts


def _overflowing_steps(folder: Path, level: str, monkeypatch, with_fast_path: bool) -> tuple[dict, int]:
    """Overflows of every kind the overflow check meets: forward and backward, in place, transposed, in float16,
    bfloat16 and float32; and calls whose inputs already hold inf, which are not overflows."""
    from msprobe.pytorch.dump.recorder import TorchDumpRecorder

    monkeypatch.setattr(fast_path, "AVAILABLE", with_fast_path)
    python_calls = []  # counted by a profile hook: a wrapper would be a frame in the stacks compared
    handler = TorchDumpRecorder.call_api.__code__
    sys.setprofile(lambda frame, event, arg: event == "call" and frame.f_code is handler and python_calls.append(1))
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(4, 4), torch.nn.ReLU()).half()
    config = {"task": "overflow_check", "level": level, "overflow_check": {"overflow_nums": -1}}
    debugger = PrecisionDebugger(**_config_args(folder, config), model=model)
    for _ in range(2):
        debugger.start()
        x = torch.full((3, 4), 2.0, dtype=torch.float16, requires_grad=True)
        y = model(x)
        z = torch.matmul(y * 300.0, y.t() * 300.0)  # forward overflow in float16
        (z.clamp(max=1.0) * 60000.0).sum().backward()  # and the float16 sum of nine 60000s
        root = torch.zeros(3, dtype=torch.float16, requires_grad=True)
        torch.sqrt(root).sum().backward()  # finite forward; sqrt's gradient at 0 is inf: a backward overflow
        with torch.no_grad():
            big = torch.full((2, 3), 3.0e4, dtype=torch.float16)
            big.t().mul_(10.0)  # in place, transposed: overflows
            big.add_(1.0)  # its input holds inf now: not an overflow
            torch.exp(torch.tensor([10.0, 100.0]))  # float32 overflow
            torch.full((3,), 3.0e38, dtype=torch.bfloat16).mul(10.0)  # bfloat16 overflow
            torch.arange(4).mul(2)  # integers cannot overflow to inf
        debugger.stop()
        debugger.step()
    sys.setprofile(None)
    monkeypatch.undo()
    return read_dump(folder / "dump"), len(python_calls)


@pytest.mark.parametrize("level", ["L1", "mix"])
def test_the_overflow_check_through_the_fast_path_keeps_what_the_python_way_keeps(tmp_path, monkeypatch, level):
    runs = [_overflowing_steps(tmp_path / str(on), level, monkeypatch, on) for on in (True, False)]
    (fast, fast_python_calls), (slow, slow_python_calls) = runs
    assert fast_python_calls == 0 and slow_python_calls > 0  # with the fast path, no call took the Python handler
    assert_same_dump(fast, slow)
    data = fast["step1/rank/dump.json"]["data"]
    kept = {"Torch.matmul.0.forward", "Tensor.sum.0.forward", "Tensor.mul_.0.forward", "Torch.exp.0.forward"}
    assert kept | {"Tensor.mul.0.forward", "Torch.sqrt.0.backward"} == set(data)  # nothing else: inf in, integers
    assert any(path.endswith(".pt") for path in fast)  # with the overflowing calls' tensors


def _journal_mid_step(folder: Path, monkeypatch, with_fast_path: bool):
    """The step's journal, replayed as a reader does after a crash, before the step's files are written."""
    from msprobe.core.dump.reader import read_dump as read_step

    monkeypatch.setattr(fast_path, "AVAILABLE", with_fast_path)
    torch.manual_seed(0)
    model = torch.nn.Linear(6, 3)
    optimizer = torch.optim.AdamW(model.parameters(), lr=0.1)
    debugger = PrecisionDebugger(task="statistics", level="mix", dump_path=str(folder), model=model)
    debugger.start()
    try:
        model(torch.randn(4, 6)).sum().backward()
        optimizer.step()
        assert not (folder / "step0" / "rank" / "dump.json").exists()  # only the journal so far
        replayed = read_step(folder / "step0" / "rank")
    finally:
        debugger.stop()
        debugger.step()
        monkeypatch.undo()
    return replayed


def test_the_journal_holds_what_the_python_way_journals(tmp_path, monkeypatch):
    """A process killed mid-step leaves the journal: the fast path's entries are in it as the Python path's are."""
    fast, slow = [_journal_mid_step(tmp_path / str(on), monkeypatch, on) for on in (True, False)]
    assert list(fast.data) == list(slow.data) and len(fast.data) > 20
    assert fast.data == slow.data and fast.stack == slow.stack and fast.construct == slow.construct


@pytest.mark.parametrize("label", ["statistics L1", "statistics mix"])
def test_the_fast_path_journals_through_core_s_c_write_and_without_it_the_same(tmp_path, monkeypatch, label):
    """The fast path hands each entry to msprobe-core's C add_journaled; the writer's Python add_journaled sees only
    what that leaves (the step's first entry, which opens the journal). Without the capsule, every entry goes to
    the Python, and the files are the same."""
    calls = []
    original = DumpWriter.add_journaled

    def counted(writer, *args):
        calls.append(args[0])
        return original(writer, *args)

    runs = []
    for with_c in (True, False):
        monkeypatch.setattr(DumpWriter, "add_journaled", counted)
        if not with_c:
            monkeypatch.setattr(fast_path, "journal_c_api", lambda: None)
        calls.clear()
        runs.append((_dump_mixed_net(tmp_path / str(with_c), CONFIGS[label], monkeypatch, True)[0], len(calls)))
    (fast, python_calls_with_c), (slow, python_calls_without) = runs
    assert_same_dump(fast, slow)
    steps = {name.split("/")[0] for name in fast if name.endswith("dump.json")}
    entries = sum(len(value["data"]) for name, value in fast.items() if name.endswith("dump.json"))
    assert python_calls_with_c == len(steps)  # one per step: the entry that opens its journal
    assert python_calls_without >= entries - len(steps) > 100


def test_a_journal_that_fails_mid_step_is_reported_once_and_the_step_files_are_whole(tmp_path, monkeypatch, caplog):
    """A full disk: the journal cannot grow; the fast path's entries still reach dump.json, and training goes on.

    A mapped journal writes into blocks reserved beforehand, so a full disk shows when it grows: here it starts
    with 2 KB, a few entries' worth, and every reservation beyond that fails.
    """
    import errno
    import os

    from msprobe.core.dump import writer as writer_module

    reserve = os.posix_fallocate
    growths = []

    def full_disk(descriptor, offset, length):
        if offset > 0:
            growths.append(offset)
            raise OSError(errno.ENOSPC, "No space left on device")
        return reserve(descriptor, offset, length)

    writer_module._SPARE_JOURNAL.drop()  # a fresh mapped journal, of the size set here
    monkeypatch.setattr(writer_module._MappedJournal.__init__, "__defaults__", (2048,))
    monkeypatch.setattr(os, "posix_fallocate", full_disk)
    weight = torch.ones(8)
    debugger = PrecisionDebugger(task="statistics", level="L1", dump_path=str(tmp_path))
    with caplog.at_level(logging.WARNING):
        debugger.start()
        with torch.no_grad():
            for _ in range(30):
                weight.mul_(0.5)
        debugger.stop()
        debugger.step()
    assert weight.tolist() == [0.5**30] * 8
    warnings = [r.getMessage() for r in caplog.records if "journal write failed" in r.getMessage()]
    assert len(warnings) == 1  # reported once
    assert len(growths) > 1 and len(set(growths)) == 1  # each later entry tries again (space may free up)
    data = json.loads((tmp_path / "step0" / "rank" / "dump.json").read_text())["data"]
    assert list(data) == [f"Tensor.mul_.{i}.forward" for i in range(30)]
    assert data["Tensor.mul_.29.forward"]["output"][0]["Max"] == 0.5**30


def test_every_attribute_the_fast_path_reads_exists_on_the_recorder_s_objects(tmp_path):
    """_fast_path.INTERFACE names the recorder state the C code reads by name; a rename on the Python side must show
    here (an overflow check, so that the overflow tracker is among the owners)."""
    from msprobe.pytorch.dump import _fast_path

    assert _fast_path.INTERFACE_VERSION == fast_path.INTERFACE_VERSION
    config = {"task": "overflow_check", "dump_path": str(tmp_path), "level": "L1"}
    debugger = PrecisionDebugger(**config)
    debugger.start()
    torch.relu(torch.ones(2))
    recorder = debugger._hooks
    collector = recorder.collector
    owners = {
        "state": recorder.state,
        "log": recorder.summarizer.write_log,
        "overflow": collector.overflow,
        "collector": collector,
        "writer": collector.open_step(),
    }
    assert all(owner is not None for owner in owners.values())
    assert fast_path.interface_problems(owners) == []
    debugger.stop()
    debugger.step()


def test_a_renamed_attribute_turns_the_fast_path_off_with_one_message(tmp_path, monkeypatch, caplog):
    from msprobe.pytorch.dump import _fast_path

    monkeypatch.setattr(_fast_path, "INTERFACE", {**_fast_path.INTERFACE, "collector": ("writer", "renamed_meanwhile")})
    monkeypatch.setattr(fast_path, "_told_interface", False)
    count = LaneCount(monkeypatch)
    with caplog.at_level(logging.WARNING):
        train_mixed_net(lambda model: PrecisionDebugger(task="statistics", level="L1", dump_path=str(tmp_path)))
    assert caplog.text.count("the per-call path in C is off: it reads") == 1
    assert "renamed_meanwhile" in caplog.text
    assert count.python_entries > 100  # every entry went the Python way
    assert (tmp_path / "step1" / "rank" / "dump.json").exists()


def test_md5_checksums_come_with_the_cached_statistics_and_are_the_bytes_crc32(tmp_path):
    import zlib

    torch.manual_seed(0)
    model = torch.nn.Linear(8, 3)
    x = torch.randn(5, 8)
    (tmp_path / "c.json").write_text(json.dumps({"task": "statistics", "level": "L1", "dump_path": str(tmp_path / "d"),
                                                 "statistics": {"summary_mode": "md5"}}))  # fmt: skip
    debugger = PrecisionDebugger(config_path=str(tmp_path / "c.json"), model=model)
    debugger.start()
    assert debugger._hooks.fast_path is not None and debugger._hooks.summarizer.quick_texts is not None
    model(x).sum().backward()
    debugger.stop()
    debugger.step()
    entry = json.loads((tmp_path / "d" / "step0" / "rank" / "dump.json").read_text())["data"][
        "Functional.linear.0.forward"
    ]
    crc = [f"{zlib.crc32(t.detach().numpy().tobytes()):08x}" for t in (x, model.weight, model.bias)]
    assert [value["md5"] for value in entry["input_args"]] == crc  # zlib's CRC-32 of the bytes
    assert list(entry["input_args"][0])[-2:] == ["requires_grad", "md5"]  # the reference's key order


@pytest.mark.parametrize("with_fast_path", [True, False])
def test_the_overflow_check_hands_only_nonfinite_gradients_to_python(tmp_path, monkeypatch, with_fast_path):
    """The fast path screens the gradients leaving each call's node in C; the recorder's hook sees only inf or nan."""
    from msprobe.pytorch.dump import call_record

    monkeypatch.setattr(fast_path, "AVAILABLE", with_fast_path)
    record_type = call_record.CallRecord
    seen = []
    original_hook = record_type._node_hook

    def hook(record, *grads):
        seen.append(record.backward_name)
        return original_hook(record, *grads)

    monkeypatch.setattr(record_type, "_node_hook", hook)
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(4, 4), torch.nn.Tanh())
    config = {"task": "overflow_check", "level": "L1", "overflow_check": {"overflow_nums": -1}}
    debugger = PrecisionDebugger(**_config_args(tmp_path / "run", config))
    debugger.start()
    model(torch.randn(2, 4)).sum().backward()  # finite everywhere
    root = torch.zeros(3, requires_grad=True)
    torch.sqrt(root).sum().backward()  # sqrt's gradient at 0 is inf
    debugger.stop()
    debugger.step()
    data = read_dump(tmp_path / "run" / "dump")["step0/rank/dump.json"]["data"]
    assert set(data) == {"Torch.sqrt.0.backward"}
    if with_fast_path:
        assert seen == ["Torch.sqrt.0.backward"]
    else:
        assert len(seen) > 3 and "Torch.sqrt.0.backward" in seen  # every call's node, finite or not


def _handed_back_overflow(folder: Path, monkeypatch, with_fast_path: bool) -> dict:
    monkeypatch.setattr(fast_path, "AVAILABLE", with_fast_path)
    config = {"task": "overflow_check", "level": "L1", "overflow_check": {"overflow_nums": -1}}
    debugger = PrecisionDebugger(**_config_args(folder, config))
    debugger.start()
    root = torch.ones(3, requires_grad=True)
    same = root.to(torch.float32)  # hands its input back: the gradient arriving at it is the one watched
    low = torch.sqrt(same * 0.0)  # the square root's gradient at 0 is inf; times 0 it is nan
    torch.nn.functional.dropout(low, p=0.0, training=False).sum().backward()  # handed back too, finite
    (torch.ones(2, requires_grad=True) * 2.0).sum().backward()  # finite: nothing
    debugger.stop()
    debugger.step()
    monkeypatch.undo()
    return read_dump(folder / "dump")


def test_the_overflow_checks_backward_screen_in_c_keeps_what_python_keeps(tmp_path, monkeypatch):
    fast, slow = (_handed_back_overflow(tmp_path / str(on), monkeypatch, on) for on in (True, False))
    assert_same_dump(fast, slow)
    data = fast["step0/rank/dump.json"]["data"]
    # inf or nan arriving is no overflow: the calls after the square root's (and the handed-back ones, whose
    # gradients pass through unchanged) keep no entry
    assert set(data) == {"Torch.sqrt.0.backward"}


def _train_with_an_inf(make_debugger) -> list:
    """The mixed net for two steps, the second with an inf in its input (nan and inf all through it, so entries
    get their *_except_inf_nan pairs)."""
    torch.manual_seed(3)
    model = MixedNet()
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-2)
    debugger = make_debugger(model)
    generator = torch.Generator().manual_seed(3)
    losses = []
    for step in range(2):
        debugger.start()
        x = torch.randn(3, 5, 16, generator=generator)
        if step == 1:
            x[0, 2, 3] = math.inf
        loss = F.cross_entropy(model(x), torch.tensor([0, 1, 2]))
        loss.backward()
        optimizer.step()
        optimizer.zero_grad()
        losses.append(loss.detach().clone())
        debugger.stop()
        debugger.step()
    return losses


def _dump_bytes(root: Path) -> dict[str, bytes]:
    """Every file's bytes, dump.json's header line naming the run's own folder left out."""
    found = {}
    for path in sorted(root.rglob("*")):
        if path.is_file():
            data = path.read_bytes()
            if path.name == "dump.json":
                data = b"\n".join(line for line in data.split(b"\n") if b'"dump_data_dir"' not in line)
            found[str(path.relative_to(root))] = data
    return found


@pytest.mark.parametrize("limit", [3, 256])
@pytest.mark.parametrize("label", ["statistics L1", "statistics mix", "md5 L1", "tensor L1"])
def test_device_statistics_through_the_fast_path_are_the_python_ways_byte_for_byte(tmp_path, monkeypatch, label, limit):
    """With the device path forced (CPU tensors measured and read back as on a GPU), the fast path writes each entry
    at once with tokens for the values still in the batch; filled in at read-back, the files are the Python
    way's byte for byte, including the inf/nan extremes, with the batch read back mid-call (limit 3) or not."""
    monkeypatch.setattr(device_batch, "FORCE_DEVICE_PATH", True)
    whole = device_batch.DeviceBatch
    monkeypatch.setattr(device_batch, "DeviceBatch", lambda: whole(limit))
    dumps, losses = [], []
    for with_fast_path in (True, False):
        folder = tmp_path / str(with_fast_path)
        arguments = _config_args(folder, CONFIGS[label])
        with pytest.MonkeyPatch.context() as patch:
            patch.setattr(fast_path, "AVAILABLE", with_fast_path)
            count = LaneCount(patch)
            made = []

            def make(model, made=made, arguments=arguments):
                made.append(PrecisionDebugger(**arguments, model=model))
                return made[0]

            losses.append(_train_with_an_inf(make))
            assert (made[0]._hooks.fast_path is not None) == with_fast_path
            assert (count.python_entries == 0) == with_fast_path
        dumps.append(_dump_bytes(folder / "dump"))
    assert dumps[0].keys() == dumps[1].keys()
    for name in dumps[0]:
        if not name.endswith("stack.json"):  # the stacks name the two lines of this loop
            assert dumps[0][name] == dumps[1][name], name
    assert all(torch.equal(a, b) or (a.isnan() and b.isnan()) for a, b in zip(*losses))
    assert b"Max_except_inf_nan" in dumps[0]["step1/rank/dump.json"]
    assert not any(b"\x01" in data for name, data in dumps[0].items() if name.endswith(".json"))  # no token left
    assert len(PLACEHOLDERS) == 0  # and none waiting


def test_on_the_device_path_an_entry_given_up_lets_go_of_its_tokens(tmp_path, monkeypatch, caplog):
    """A call whose entry is lost (one of its values fails to encode after a device tensor's summary was written
    with its token) leaves nothing waiting: the token's value is let go of, and the next calls are whole."""
    _fail_to_encode_dtypes(monkeypatch)
    monkeypatch.setattr(device_batch, "FORCE_DEVICE_PATH", True)
    debugger = PrecisionDebugger(task="statistics", level="L1", dump_path=str(tmp_path))
    debugger.start()
    try:
        assert debugger._hooks.fast_path is not None and debugger._hooks.summarizer.batch is not None
        with torch.no_grad():
            base = torch.ones(3)
            torch.sum(base, dtype=torch.float64)  # the input's summary gets a token; the dtype keyword then fails
            assert len(PLACEHOLDERS) == 0
            base.add(1)
    finally:
        debugger.stop()
    debugger.step()
    assert [r.getMessage() for r in caplog.records if "simulated failure" in r.getMessage()]
    data = json.loads((tmp_path / "step0" / "rank" / "dump.json").read_text())["data"]
    assert "Tensor.add.0.forward" in data and not any(name.startswith("Torch.sum.") for name in data)
    assert data["Tensor.add.0.forward"]["output"][0]["Max"] == 2.0
    assert len(PLACEHOLDERS) == 0


def test_a_value_orjson_refuses_is_encoded_with_its_values_read_and_no_token_left(monkeypatch):
    """An integer beyond 64 bits beside a device tensor: the text is made the writer's way (values read now),
    and the tokens of the first try are let go of."""
    monkeypatch.setattr(device_batch, "FORCE_DEVICE_PATH", True)
    from msprobe.pytorch.dump import tensors

    summarizer = tensors.TensorSummarizer("statistics", "statistics")
    value = [summarizer(torch.tensor([1.0, -2.0]), "x"), {"type": "int", "value": 2**70}]
    text = device_batch.waiting_json(value)
    assert "\x01" not in text and json.loads(text)[0]["Min"] == -2.0 and json.loads(text)[1]["value"] == 2**70
    assert len(PLACEHOLDERS) == 0


def test_a_value_orjson_refuses_beside_an_inf_tensor_keeps_its_extremes(monkeypatch):
    """The same with a tensor holding an inf: the writer's way gives its *_except_inf_nan pair after
    requires_grad, as the Python recorder writes it."""
    monkeypatch.setattr(device_batch, "FORCE_DEVICE_PATH", True)
    from msprobe.pytorch.dump import tensors

    summarizer = tensors.TensorSummarizer("statistics", "statistics")
    value = {"": summarizer(torch.tensor([math.inf, -math.inf, 1.0]), "x"), "0": {"type": "int", "value": -(2**63) - 1}}
    found = json.loads(device_batch.waiting_json(value))[""]
    assert list(found)[-3:] == ["requires_grad", "Max_except_inf_nan", "Min_except_inf_nan"]
    assert (found["requires_grad"], found["Max_except_inf_nan"], found["Min_except_inf_nan"]) == (False, 1.0, 1.0)
    assert len(PLACEHOLDERS) == 0


def test_an_inf_tensor_after_a_value_orjson_refuses_keeps_its_extremes(tmp_path, monkeypatch):
    """The integer first: the standard encoder meets the tensor's summary before anything read its batch, and
    a read-back in the middle of a dict adds keys the encoder has passed. Through the fast path and through the
    Python recorder, the entry is the same."""
    monkeypatch.setattr(device_batch, "FORCE_DEVICE_PATH", True)
    args = ({"": [-(2**63) - 1, torch.tensor([math.inf])]},)
    by_fast_path = record_call(tmp_path / "fast_path", True, args, {}, None)
    by_python = record_call(tmp_path / "python", False, args, {}, None)
    found = by_fast_path["input_args"][0][""][1]
    assert (found["Max_except_inf_nan"], found["Min_except_inf_nan"]) == (math.inf, math.inf)
    assert json.dumps(by_fast_path) == json.dumps(by_python)
    assert len(PLACEHOLDERS) == 0


class _Refusing(torch.nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        raise ValueError("refused")


class _CatchingNet(torch.nn.Module):
    """A model whose inner module raises on inputs just made by an API call, and which carries on."""

    def __init__(self):
        super().__init__()
        self.linear, self.refusing = torch.nn.Linear(4, 4), _Refusing()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = self.linear(x)
        with pytest.raises(ValueError, match="refused"):
            self.refusing(torch.relu(y) * 2)
        return y.sum()


def test_a_module_that_raises_lets_go_of_its_inputs_waiting_values(tmp_path, monkeypatch):
    """On the device path a module's inputs are written when its call starts, with tokens for values still in
    the batch; a forward that raises is never written, and its tokens go with it rather than staying in the
    table for the rest of the run."""
    monkeypatch.setattr(device_batch, "FORCE_DEVICE_PATH", True)
    model = _CatchingNet()
    debugger = PrecisionDebugger(task="statistics", level="mix", dump_path=str(tmp_path))
    waiting_before = len(PLACEHOLDERS)
    for _ in range(2):
        debugger.start(model)
        model(torch.randn(2, 4)).backward()
        debugger.stop()
        debugger.step()
    assert len(PLACEHOLDERS) == waiting_before
    data = json.loads((tmp_path / "step1" / "rank" / "dump.json").read_text())["data"]
    assert "Module.linear.Linear.forward.0" in data and "Torch.relu.0.forward" in data
    assert not any(".refusing." in name for name in data)
