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


def tensor_dump(folder, seed, body):
    """A tensor L1 dump of ``body(x, w)`` on a 4x8 and an 8x3 random input."""
    debugger = PrecisionDebugger(task="tensor", level="L1", dump_path=str(folder))
    rng = np.random.default_rng(seed)
    x = Tensor(rng.standard_normal((4, 8)).astype(np.float32))
    w = Tensor(rng.standard_normal((8, 3)).astype(np.float32))
    debugger.start()
    body(x, w)
    debugger.stop()
    debugger.step()
    return folder / "step0" / "rank" / "dump.json"


@pytest.fixture(scope="module")
def dump_json(tmp_path_factory):
    def body(x, w):
        h = mint.matmul(x, w)
        mint.nn.functional.relu(h)
        mint.abs(h)
        (h * 2).sum()

    return tensor_dump(tmp_path_factory.mktemp("msdump"), 0, body)


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


@pytest.fixture(scope="module")
def trained_dump(tmp_path_factory):
    def loss(x, w):
        h = mint.matmul(x, w)
        return (mint.nn.functional.relu(h) * mint.tanh(h)).sum()

    return tensor_dump(tmp_path_factory.mktemp("msgrads"), 1, ms.value_and_grad(loss, (0, 1)))


def test_backward_is_checked_from_the_dumped_gradients(trained_dump, tmp_path):
    result = run("run_ut", "-api_info", trained_dump, "-o", tmp_path)
    assert result.exit_code == 0, result.output
    rows = results(tmp_path)
    for api in ("Mint.matmul.0.forward", "MintFunctional.relu.0.forward", "Mint.tanh.0.forward"):
        assert rows[api]["Backward Test Success"] == "pass", rows[api]
    with open(next(tmp_path.glob("accuracy_checking_details_*.csv")), encoding="utf-8-sig") as handle:
        details = {row["API Name"]: row for row in csv.DictReader(handle)}
    assert {"Mint.matmul.0.backward.output.0", "Mint.matmul.0.backward.output.1"} <= set(details)


def test_a_wrong_gradient_is_a_backward_error(trained_dump, tmp_path, monkeypatch):
    import mindspore.mint as mint_module

    original = mint_module.tanh

    def tanh_with_wrong_gradient(x):  # right forward and float64 gradient, 10% off gradient in float32
        out = original(x)
        if out.dtype == ms.float64:
            return out
        return out * 0.9 + ms.ops.stop_gradient(out * 0.1)

    monkeypatch.setattr(mint_module, "tanh", tanh_with_wrong_gradient)
    run("run_ut", "-api_info", trained_dump, "-o", tmp_path)
    rows = results(tmp_path)
    assert rows["Mint.tanh.0.forward"]["Forward Test Success"] == "pass"
    assert rows["Mint.tanh.0.forward"]["Backward Test Success"] == "error"
    assert rows["Mint.matmul.0.forward"]["Backward Test Success"] == "pass"
