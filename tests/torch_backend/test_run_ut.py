"""run_ut, multi_run_ut, resume, error data and run_overflow_check on CPU."""

import csv
import json
import math
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
import torch
import torch.nn.functional as F
from click.testing import CliRunner
from repo_paths import REFERENCE_DUMPS

from models import train_mixed_net
from msprobe.cli.main import cli
from msprobe.pytorch import PrecisionDebugger


@pytest.fixture(scope="module")
def dumps(tmp_path_factory):
    """Statistics and tensor dumps of a small transformer block, forward and backward."""
    root = tmp_path_factory.mktemp("dumps")
    for task in ("statistics", "tensor"):
        train_mixed_net(
            lambda model, t=task: PrecisionDebugger(task=t, level="L1", dump_path=str(root / t), model=model, step=[0])
        )
    return {task: root / task / "step0" / "rank" / "dump.json" for task in ("statistics", "tensor")}


def read(path):
    with open(path, encoding="utf-8-sig", newline="") as handle:
        return list(csv.DictReader(handle))


def run_ut(*args):
    return CliRunner().invoke(cli, ["-f", "pytorch", "run_ut", *map(str, args)], prog_name="msprobe")


def outputs(folder):
    result = next(folder.glob("accuracy_checking_result_*.csv"))
    details = next(folder.glob("accuracy_checking_details_*.csv"))
    return read(result), read(details)


@pytest.mark.parametrize("task", ["statistics", "tensor"])
def test_run_ut_checks_every_api_forward_and_backward(dumps, tmp_path, task):
    result = run_ut("-api_info", dumps[task], "-o", tmp_path)
    assert result.exit_code == 0, result.output
    rows, details = outputs(tmp_path)
    names = [row["API Name"] for row in rows]
    for expected in (
        "Functional.conv1d.0.forward",
        "Functional.layer_norm.0.forward",
        "Functional.linear.0.forward",
        "Functional.multi_head_attention_forward.0.forward",
        "Functional.cross_entropy.0.forward",
    ):
        assert expected in names
    by_name = {row["API Name"]: row for row in rows}
    assert by_name["Functional.linear.0.forward"]["Forward Test Success"] == "pass"
    assert by_name["Functional.linear.0.forward"]["Backward Test Success"] == "pass"
    assert by_name["Functional.dropout.0.forward"]["Forward Test Success"] == "SKIP"
    assert "random" in by_name["Functional.dropout.0.forward"]["Message"]
    linear = [d for d in details if d["API Name"].startswith("Functional.linear.0.")]
    assert {d["API Name"] for d in linear} >= {
        "Functional.linear.0.forward.output.0",
        "Functional.linear.0.backward.output.0",
    }
    forward = next(d for d in linear if d["API Name"] == "Functional.linear.0.forward.output.0")
    assert forward["Bench Dtype"] == "torch.float64" and forward["DEVICE Dtype"] == "torch.float32"
    assert float(forward["余弦相似度"]) > 0.9999 and float(forward["最大绝对误差"]) < 1e-4


def make_layer_norm_inaccurate(monkeypatch):
    """A registered wrong implementation: right in float64, 1% off in the tested precision."""
    original = F.layer_norm

    def off_by_one_percent(*args, **kwargs):
        out = original(*args, **kwargs)
        return out if out.dtype == torch.float64 else out * 1.01

    monkeypatch.setattr(F, "layer_norm", off_by_one_percent)


def test_an_inaccurate_api_is_an_error_and_exact_ones_pass(dumps, tmp_path, monkeypatch):
    make_layer_norm_inaccurate(monkeypatch)
    result = run_ut("-api_info", dumps["tensor"], "-o", tmp_path, "-save_error_data")
    assert result.exit_code == 1 and "ERRORS" in result.output
    rows, _ = outputs(tmp_path)
    by_name = {row["API Name"]: row for row in rows}
    assert by_name["Functional.layer_norm.0.forward"]["Forward Test Success"] == "error"
    assert by_name["Functional.conv1d.0.forward"]["Forward Test Success"] == "pass"
    assert by_name["Functional.relu.0.forward"]["Forward Test Success"] == "pass"
    saved = list(tmp_path.glob("ut_error_data*/Functional.layer_norm.0.forward.*.pt"))
    assert any(".device.output.0" in p.name for p in saved) and any(".bench.output.0" in p.name for p in saved)


def test_bfloat16_reduction_is_flagged(tmp_path):
    entry = {
        "input_args": [
            {
                "type": "torch.Tensor",
                "dtype": "torch.bfloat16",
                "shape": [4096],
                "Max": 100.0,
                "Min": 99.0,
                "requires_grad": False,
            }
        ],
        "input_kwargs": {},
        "output": [{"type": "torch.Tensor", "dtype": "torch.bfloat16", "shape": [4096]}],
    }
    data = {
        "Torch.cumsum.0.forward": {**entry, "input_kwargs": {"dim": {"type": "int", "value": 0}}},
        "Torch.abs.0.forward": entry,
    }
    (tmp_path / "dump.json").write_text(
        json.dumps({"task": "statistics", "level": "L1", "framework": "pytorch", "dump_data_dir": None, "data": data})
    )
    run_ut("-api_info", tmp_path / "dump.json", "-o", tmp_path / "out")
    rows, _ = outputs(tmp_path / "out")
    by_name = {row["API Name"]: row for row in rows}
    assert by_name["Torch.cumsum.0.forward"]["Forward Test Success"] in ("error", "warning")
    assert by_name["Torch.abs.0.forward"]["Forward Test Success"] == "pass"


def test_multi_run_ut_merges_into_the_same_files(dumps, tmp_path):
    single = run_ut("-api_info", dumps["statistics"], "-o", tmp_path / "one")
    multi = CliRunner().invoke(
        cli,
        [
            "-f",
            "pytorch",
            "multi_run_ut",
            "-api_info",
            str(dumps["statistics"]),
            "-o",
            str(tmp_path / "two"),
            "-n",
            "2",
        ],
        prog_name="msprobe",
    )
    assert single.exit_code == multi.exit_code == 0, multi.output
    assert outputs(tmp_path / "one") == outputs(tmp_path / "two")


KILLER = textwrap.dedent(
    """
    import os, signal, sys
    import msprobe.pytorch.precheck.run_ut as run_ut
    original = run_ut.ApiRunner.run
    calls = {"n": 0}
    def run(self, name):
        calls["n"] += 1
        if calls["n"] > int(sys.argv[1]):
            os.kill(os.getpid(), signal.SIGKILL)
        return original(self, name)
    run_ut.ApiRunner.run = run
    from msprobe.cli.main import main
    main(sys.argv[2:])
    """
)


def test_killed_at_half_and_resumed_equals_an_uninterrupted_run(dumps, tmp_path):
    reference = run_ut("-api_info", dumps["statistics"], "-o", tmp_path / "whole")
    assert reference.exit_code == 0
    total = len(outputs(tmp_path / "whole")[0])
    script = tmp_path / "killer.py"
    script.write_text(KILLER)
    killed = subprocess.run(
        [
            sys.executable,
            str(script),
            str(total // 2),
            "-f",
            "pytorch",
            "run_ut",
            "-api_info",
            str(dumps["statistics"]),
            "-o",
            str(tmp_path / "cut"),
        ],
        capture_output=True,
        text=True,
        env={**os.environ, "PYTHONPATH": ""},
    )
    assert killed.returncode == -9
    cut_result = next((tmp_path / "cut").glob("accuracy_checking_result_*.csv"))
    assert 0 < len(read(cut_result)) < total
    resumed = run_ut("-api_info", dumps["statistics"], "-o", tmp_path / "cut", "-csv_path", cut_result)
    assert resumed.exit_code == 0, resumed.output
    assert outputs(tmp_path / "cut") == outputs(tmp_path / "whole")


def test_resume_refuses_a_file_that_is_not_a_result(tmp_path, dumps):
    bogus = tmp_path / "results.csv"
    bogus.write_text("a,b\n")
    result = run_ut("-api_info", dumps["statistics"], "-csv_path", bogus)
    assert result.exit_code == 2 and "accuracy_checking_result_" in result.output


def test_run_overflow_check_tells_normal_from_abnormal(tmp_path):
    folder = tmp_path / "dump_tensor_data"
    folder.mkdir()

    def tensor(name, value):
        torch.save(torch.full((4, 4), value, dtype=torch.float16), folder / name)
        return {
            "type": "torch.Tensor",
            "dtype": "torch.float16",
            "shape": [4, 4],
            "data_name": name,
            "requires_grad": False,
        }

    overflowed = [{"type": "torch.Tensor", "dtype": "torch.float16", "shape": [4, 4], "Max": math.inf, "Min": 0.0}]
    data = {  # 300 * 300 * 4 overflows float16 on any device; 1 + 1 overflows nowhere (the device said it did)
        "Torch.matmul.0.forward": {
            "input_args": [tensor("a.pt", 300.0), tensor("b.pt", 300.0)],
            "input_kwargs": {},
            "output": overflowed,
        },
        "Torch.add.0.forward": {
            "input_args": [tensor("c.pt", 1.0), tensor("d.pt", 1.0)],
            "input_kwargs": {},
            "output": overflowed,
        },
    }
    header = {"task": "overflow_check", "level": "L1", "framework": "pytorch", "dump_data_dir": None}
    (tmp_path / "dump.json").write_text(json.dumps({**header, "data": data}))
    result = CliRunner().invoke(cli, ["-f", "pytorch", "run_overflow_check", "-api_info", str(tmp_path / "dump.json")])
    assert "The Torch.matmul.0.forward overflow is a normal overflow." in result.output
    assert "The Torch.add.0.forward overflow is an abnormal overflow." in result.output


def test_reference_fixture_runs(tmp_path):
    result = run_ut(
        "-api_info", REFERENCE_DUMPS / "pytorch" / "tensor_L1" / "step0" / "rank" / "dump.json", "-o", tmp_path
    )
    assert result.exit_code == 0 and "10 APIs checked: 10 pass" in result.output


def test_api_precision_compare_flags_the_worse_device(dumps, tmp_path, monkeypatch):
    assert run_ut("-api_info", dumps["tensor"], "-o", tmp_path / "gpu").exit_code == 0
    make_layer_norm_inaccurate(monkeypatch)
    run_ut("-api_info", dumps["tensor"], "-o", tmp_path / "npu")
    npu = next((tmp_path / "npu").glob("accuracy_checking_details_*.csv"))
    gpu = next((tmp_path / "gpu").glob("accuracy_checking_details_*.csv"))
    result = CliRunner().invoke(
        cli,
        ["api_precision_compare", "-npu", str(npu), "-gpu", str(gpu), "-o", str(tmp_path / "cmp")],
        prog_name="msprobe",
    )
    assert result.exit_code == 1 and "1 API(s) in error" in result.output
    rows = {row["API Name"]: row for row in read(next((tmp_path / "cmp").glob("api_precision_compare_result_*.csv")))}
    assert rows["Functional.layer_norm.0.forward"]["Forward Test Success"] == "error"
    assert rows["Functional.linear.0.forward"]["Forward Test Success"] == "pass"
    details = read(next((tmp_path / "cmp").glob("api_precision_compare_details_*.csv")))
    layer_norm = next(d for d in details if d["API Name"] == "Functional.layer_norm.0.forward.output.0")
    assert layer_norm["比对算法"] == "标杆比对法" and float(layer_norm["均方根误差比值"]) > 2
    relu = next(d for d in details if d["API Name"] == "Functional.relu.0.forward.output.0")
    assert relu["比对算法"] == "二进制一致法" and relu["二进制一致错误率判定结果"] == "pass"
    bad = CliRunner().invoke(cli, ["api_precision_compare", "-npu", str(dumps["tensor"]), "-gpu", str(gpu)])
    assert bad.exit_code == 2 and "not an accuracy_checking_details file" in bad.output


def test_a_data_name_outside_the_dump_is_never_read(tmp_path):
    """The API is skipped with a message naming the file name; /etc/passwd is not opened as a tensor."""
    import shutil

    from repo_paths import REFERENCE_DUMPS

    shutil.copytree(REFERENCE_DUMPS / "pytorch" / "tensor_L1" / "step0" / "rank", tmp_path / "dump")
    path = tmp_path / "dump" / "dump.json"
    data = json.loads(path.read_text())
    data["data"]["Functional.relu.0.forward"]["input_args"][0]["data_name"] = "../../../etc/passwd"
    path.write_text(json.dumps(data))
    result = CliRunner().invoke(cli, ["-f", "pytorch", "run_ut", "-api_info", str(path), "-o", str(tmp_path / "out")])
    assert "Traceback" not in result.output, result.output
    rows = list(csv.reader(next((tmp_path / "out").glob("accuracy_checking_result_*.csv")).open()))
    [relu] = [row for row in rows if row[0] == "Functional.relu.0.forward"]
    assert relu[1] == "SKIP" and "'../../../etc/passwd' is not a file name inside the dump folder" in relu[-1]


def test_run_overflow_check_on_a_dump_without_overflow_says_so_and_fails(tmp_path):
    """A statistics dump of a healthy run: nothing overflowed, so nothing is called an overflow (exit non-zero)."""
    dump = REFERENCE_DUMPS / "pytorch" / "tensor_L1" / "step0" / "rank" / "dump.json"
    result = CliRunner().invoke(cli, ["-f", "pytorch", "run_overflow_check", "-api_info", str(dump)])
    assert result.exit_code != 0 and "overflow is" not in result.output
    assert "no API overflowed in this dump" in result.output


def _split_run(dumps, tmp_path, monkeypatch, runner: str, processes: int, die_at: str = ""):
    from msprobe.core.precheck.driver import run_ut as drive

    marks = tmp_path / f"marks-{runner}"
    marks.mkdir()
    monkeypatch.setenv("MSPROBE_TEST_MARKS", str(marks))
    monkeypatch.setenv("MSPROBE_TEST_PARENT", str(os.getpid()))
    monkeypatch.setenv("MSPROBE_TEST_DIE_AT", die_at)
    summary = drive(dump_json=dumps["statistics"], output_dir=tmp_path / runner, runner_path=f"split_runners:{runner}",
                    save_error_path="msprobe.pytorch.precheck.run_ut:save_error_data", devices=["cpu"],
                    processes=processes)  # fmt: skip
    by_process = {}
    for mark in marks.iterdir():
        pid, name = mark.name.split("-", 1)
        by_process.setdefault(int(pid), set()).add(name)
    return summary, by_process


def test_multi_run_ut_helpers_share_the_work_and_the_files_equal_run_ut(dumps, tmp_path, monkeypatch):
    single = run_ut("-api_info", dumps["statistics"], "-o", tmp_path / "one")
    assert single.exit_code == 0, single.output
    summary, by_process = _split_run(dumps, tmp_path, monkeypatch, "SlowParentRunner", 3)
    names = [row["API Name"] for row in outputs(tmp_path / "one")[0]]
    assert summary.checked == len(names) > 20
    helpers = {pid: checked for pid, checked in by_process.items() if pid != os.getpid()}
    assert helpers and sum(map(len, helpers.values())) > 0  # the helpers took chunks
    assert set().union(*by_process.values()) >= set(names)  # every API checked by someone
    assert outputs(tmp_path / "SlowParentRunner") == outputs(tmp_path / "one")  # same rows, the dump's order


def test_a_helper_that_dies_loses_no_api(dumps, tmp_path, monkeypatch, caplog):
    single = run_ut("-api_info", dumps["statistics"], "-o", tmp_path / "one")
    names = [row["API Name"] for row in outputs(tmp_path / "one")[0]]
    # the helper dies at the first API it runs (whichever chunk it took first, however loaded the machine)
    with caplog.at_level("WARNING", logger="msprobe.core.precheck.split"):
        summary, by_process = _split_run(dumps, tmp_path, monkeypatch, "DyingHelperRunner", 2, die_at="*")
    [victim] = [
        mark[len("died-at-") :] for marks in by_process.values() for mark in marks if mark.startswith("died-at-")
    ]
    assert victim in names
    assert "helper 0 ended early (exit code 3)" in caplog.text  # it did die, holding the victim's chunk
    assert single.exit_code == 0 and summary.checked == len(names)
    assert victim in by_process[os.getpid()]  # the parent ran the dead helper's chunk
    assert outputs(tmp_path / "DyingHelperRunner") == outputs(tmp_path / "one")


@pytest.mark.parametrize("command, bar", [(["run_ut"], "run_ut: "), (["multi_run_ut", "-n", "2"], "run_ut: ")])
def test_run_ut_shows_a_bar_on_a_terminal_only(dumps, tmp_path, command, bar):
    from terminal import on_a_terminal

    # a few forward entries are enough to draw a bar: each run starts a fresh interpreter, twice per command
    whole = json.loads(Path(dumps["statistics"]).read_text())
    forward = [name for name in whole["data"] if name.endswith(".forward")][:6]
    few = tmp_path / "few" / "dump.json"
    few.parent.mkdir()
    few.write_text(json.dumps({**whole, "data": {name: whole["data"][name] for name in forward}}))
    line = [sys.executable, "-m", "msprobe.cli.main", "-f", "pytorch", command[0]]
    line += ["-api_info", str(few)]
    shown = on_a_terminal([*line, "-o", str(tmp_path / "tty"), *command[1:]], tmp_path)
    assert bar in shown and "%|" in shown
    piped = subprocess.run([*line, "-o", str(tmp_path / "pipe"), *command[1:]], capture_output=True, text=True)
    assert piped.returncode == 0, piped.stderr
    assert bar not in piped.stdout + piped.stderr
