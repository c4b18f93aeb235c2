"""A 26.x-style config.json runs, field by field, with the meaning mindstudio-probe 26.x's documentation gives.

Expected entries are derived by hand from the model's calls and 26.x's
documented rules (risk levels: shape, dtype and creation APIs are low risk;
matrix products, norms and collectives are core).
"""

import csv
import json
import os
import time

import pytest
import torch
import torch.nn.functional as F
from click.testing import CliRunner

from msprobe.cli.main import cli
from msprobe.core.dump.reader import read_dump
from msprobe.pytorch import PrecisionDebugger


class Net(torch.nn.Module):
    """linear, reshape, relu, transpose, matmul, cat, layer_norm, permute: core, low and focus APIs side by side."""

    def __init__(self):
        super().__init__()
        self.fc = torch.nn.Linear(4, 6)

    def forward(self, x):
        h = self.fc(x).reshape(3, 6)
        h = F.relu(h).transpose(0, 1)
        h = torch.matmul(h, h.t())
        h = torch.cat([h, h], dim=0)
        return F.layer_norm(h, (6,)).permute(1, 0)


def _run(tmp_path, config, steps=1, between=None, model=None):
    torch.manual_seed(0)
    model = model or Net()
    tmp_path.mkdir(parents=True, exist_ok=True)
    path = tmp_path / "config.json"
    path.write_text(json.dumps({"dump_path": str(tmp_path / "dump"), **config}))
    debugger = PrecisionDebugger(config_path=str(path), model=model)
    for step in range(steps):
        if between is not None:
            between(step, path)
        debugger.start()
        model(torch.randn(3, 4)).sum().backward()
        debugger.stop()
        debugger.step()
    return tmp_path / "dump"


def _forward_apis(dump_root, step=0):
    data = read_dump(dump_root / f"step{step}" / "rank" / "dump.json").data
    return sorted(name for name in data if name.endswith(".forward") and not name.startswith("Module."))


FOCUS = ["Functional.layer_norm.0.forward", "Functional.linear.0.forward", "Functional.relu.0.forward",
         "Tensor.sum.0.forward", "Tensor.t.0.forward", "Torch.matmul.0.forward"]  # fmt: skip
CORE = ["Functional.layer_norm.0.forward", "Functional.linear.0.forward", "Torch.matmul.0.forward"]
# ones_like: backward() makes the loss's first gradient with it
LOW = ["Tensor.permute.0.forward", "Tensor.reshape.0.forward", "Tensor.transpose.0.forward", "Torch.cat.0.forward",
       "Torch.ones_like.0.forward"]  # fmt: skip


@pytest.mark.parametrize(
    "config, expected",
    [
        ({"risk_level": "FOCUS"}, FOCUS),
        ({"risk_level": "CORE"}, CORE),
        ({"risk_level": "ALL"}, sorted(FOCUS + LOW)),
        ({"extra_info": True}, FOCUS),  # a 26.x config without risk_level: 26.x's default, FOCUS
        ({}, sorted(FOCUS + LOW)),  # 1.2.2's spelling: every API, as 1.2.2 dumps
        (
            {"risk_level": "CORE", "statistics": {"list": ["relu", "reshape"]}},
            ["Functional.relu.0.forward", "Tensor.reshape.0.forward"],
        ),
    ],
    ids=["focus", "core", "all", "26x-default", "1.2.2-default", "list-wins"],
)
@pytest.mark.parametrize("level", ["L1", "mix"])
def test_risk_level_picks_the_apis(tmp_path, config, expected, level):
    dump = _run(tmp_path, {"task": "statistics", "level": level, **config})
    assert _forward_apis(dump) == expected
    data = read_dump(dump / "step0" / "rank" / "dump.json").data
    if "statistics" not in config:  # with no list, modules are always kept
        assert ("Module.fc.Linear.forward.0" in data) == (level == "mix")


def test_extra_info_false_writes_the_same_entries_without_stack_and_construct(tmp_path):
    with_info = _run(tmp_path / "on", {"task": "statistics", "level": "mix", "extra_info": True, "risk_level": "ALL"})
    without = _run(tmp_path / "off", {"task": "statistics", "level": "mix", "extra_info": False, "risk_level": "ALL"})
    folder = without / "step0" / "rank"
    assert sorted(p.name for p in folder.iterdir() if not p.name.startswith(".")) == ["dump.json"]
    assert (with_info / "step0" / "rank" / "stack.json").exists()
    assert read_dump(folder / "dump.json").data == read_dump(with_info / "step0" / "rank" / "dump.json").data


@pytest.mark.parametrize("precision", ["high", "low"])
def test_precision_gives_the_statistics_of_the_values(tmp_path, precision):
    """On CPU both precisions measure the same way; half tensors are measured in float32 (checked with numpy)."""
    model = Net().half()

    def forward_half(x):
        return Net.forward(model, x.half())

    model.forward = forward_half
    dump = _run(tmp_path, {"task": "statistics", "level": "L1", "precision": precision}, model=model)
    entry = read_dump(dump / "step0" / "rank" / "dump.json").data["Functional.linear.0.forward"]
    weight = model.fc.weight.detach().float().numpy()
    stats = entry["input_args"][1]
    assert stats["dtype"] == "torch.float16"
    assert stats["Max"] == pytest.approx(float(weight.max()), rel=1e-6)
    assert stats["Norm"] == pytest.approx(float((weight.astype("float64") ** 2).sum() ** 0.5), rel=1e-5)


def test_dump_enable_pauses_and_resumes_as_the_file_is_edited(tmp_path):
    plan = {1: True, 2: False, 3: True}  # step 0 runs with the file's initial false

    def edit(step, path):
        if step in plan:
            raw = json.loads(path.read_text())
            raw["dump_enable"] = plan[step]
            if step == 3:
                raw["statistics"] = {"summary_mode": "md5"}  # another edited field takes effect too
            path.write_text(json.dumps(raw))
            stamp = time.time_ns() + step * 1_000_000_000  # a different mtime even on a coarse clock
            os.utime(path, ns=(stamp, stamp))

    dump = _run(tmp_path, {"task": "statistics", "level": "L1", "dump_enable": False}, steps=4, between=edit)
    assert sorted(p.name for p in dump.iterdir()) == ["step1", "step3"]
    step1 = read_dump(dump / "step1" / "rank" / "dump.json").data["Functional.linear.0.forward"]
    step3 = read_dump(dump / "step3" / "rank" / "dump.json").data["Functional.linear.0.forward"]
    assert "md5" not in step1["input_args"][0] and "md5" in step3["input_args"][0]


def test_an_edited_config_that_breaks_keeps_the_last_good_one(tmp_path, caplog):
    def edit(step, path):
        if step == 1:
            path.write_text('{"task": "statistics", "dump_enable": true, "level": "L7"}')
            os.utime(path, ns=(time.time_ns() + 10**9, time.time_ns() + 10**9))

    dump = _run(tmp_path, {"task": "statistics", "level": "L1", "dump_enable": True}, steps=2, between=edit)
    assert sorted(p.name for p in dump.iterdir()) == ["step0", "step1"]
    assert any("level" in record.getMessage() and "last good" in record.getMessage() for record in caplog.records)


def test_async_dump_in_a_26x_config_writes_what_a_sync_dump_writes(tmp_path):
    sync = _run(tmp_path / "sync", {"task": "statistics", "level": "L1", "extra_info": True})
    deferred = _run(tmp_path / "async", {"task": "statistics", "level": "L1", "extra_info": True, "async_dump": True})
    assert (
        read_dump(deferred / "step0" / "rank" / "dump.json").data
        == read_dump(sync / "step0" / "rank" / "dump.json").data
    )


def test_proc_folder_when_there_is_no_rank(tmp_path):
    dump = _run(tmp_path, {"task": "statistics", "level": "L1", "folder_without_rank": "proc"})
    assert [p.name for p in (dump / "step0").iterdir()] == [f"proc{os.getpid()}"]
    data = read_dump(dump / "step0" / f"proc{os.getpid()}" / "dump.json").data
    assert "Functional.linear.0.forward" in data


def test_task_acc_check_config_drives_run_ut(tmp_path):
    dump = _run(tmp_path / "d", {"task": "statistics", "level": "L1"})
    config = tmp_path / "acc.json"
    config.write_text(
        json.dumps({"task": "acc_check", "dump_path": str(tmp_path), "acc_check": {"white_list": ["relu"]}})
    )
    out = tmp_path / "out"
    result = CliRunner().invoke(
        cli,
        ["-f", "pytorch", "acc_check", "-api_info", str(dump / "step0" / "rank" / "dump.json"), "-o", str(out),
         "-config", str(config)],
    )  # fmt: skip
    assert result.exit_code == 0, result.output
    with open(next(out.glob("accuracy_checking_result_*.csv")), encoding="utf-8-sig") as handle:
        names = {row["API Name"] for row in csv.DictReader(handle)}
    assert names and all(".relu." in name for name in names)
