"""run_ut on MindSpore: the shared driver and result files; MindSpore float64 as the benchmark here."""

import csv

import mindspore as ms
import numpy as np
import pytest
from click.testing import CliRunner
from mindspore import Tensor, mint

from msprobe.cli.main import cli
from msprobe.mindspore import PrecisionDebugger

ms.set_context(mode=ms.PYNATIVE_MODE)


@pytest.fixture(scope="module")
def dump_json(tmp_path_factory):
    folder = tmp_path_factory.mktemp("msdump")
    debugger = PrecisionDebugger(task="tensor", level="L1", dump_path=str(folder))
    rng = np.random.default_rng(0)
    x = Tensor(rng.standard_normal((4, 8)).astype(np.float32))
    w = Tensor(rng.standard_normal((8, 3)).astype(np.float32))
    debugger.start()
    h = mint.matmul(x, w)
    mint.nn.functional.relu(h)
    mint.abs(h)
    (h * 2).sum()
    debugger.stop()
    debugger.step()
    return folder / "step0" / "rank" / "dump.json"


def run(*args):
    return CliRunner().invoke(cli, ["-f", "mindspore", *map(str, args)], prog_name="msprobe")


def results(folder):
    with open(next(folder.glob("accuracy_checking_result_*.csv")), encoding="utf-8-sig") as handle:
        return {row["API Name"]: row for row in csv.DictReader(handle)}


def test_every_api_is_checked(dump_json, tmp_path):
    result = run("run_ut", "-api_info", dump_json, "-o", tmp_path)
    assert result.exit_code == 0, result.output
    rows = results(tmp_path)
    assert {"Mint.matmul.0.forward", "MintFunctional.relu.0.forward", "Mint.abs.0.forward"} <= set(rows)
    assert all(row["Forward Test Success"] == "pass" for row in rows.values()), rows


def test_an_inaccurate_api_is_an_error(dump_json, tmp_path, monkeypatch):
    original = mint.abs

    def wrong_abs(x):  # right in float64, 1% off in the tested precision
        out = original(x)
        return out if out.dtype == ms.float64 else out * 1.01

    monkeypatch.setattr(mint, "abs", wrong_abs)
    result = run("run_ut", "-api_info", dump_json, "-o", tmp_path)
    assert result.exit_code == 1
    rows = results(tmp_path)
    assert rows["Mint.abs.0.forward"]["Forward Test Success"] == "error"
    assert rows["Mint.matmul.0.forward"]["Forward Test Success"] == "pass"


def test_multi_run_ut_and_resume_use_the_shared_driver(dump_json, tmp_path):
    assert run("multi_run_ut", "-api_info", dump_json, "-o", tmp_path / "multi", "-n", "2").exit_code == 0
    assert run("run_ut", "-api_info", dump_json, "-o", tmp_path / "one").exit_code == 0
    assert results(tmp_path / "multi") == results(tmp_path / "one")
    done = next((tmp_path / "one").glob("accuracy_checking_result_*.csv"))
    again = run("run_ut", "-api_info", dump_json, "-csv_path", done)
    assert again.exit_code == 0 and results(tmp_path / "one") == results(tmp_path / "multi")
