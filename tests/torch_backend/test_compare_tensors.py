"""Compare with .pt tensor files: this tool against the reference tool, metric values, injected errors."""

import json

import numpy as np
import openpyxl
import pytest
import torch
from repo_paths import REFERENCE_DUMPS

from models import train_fixture_net, train_mixed_net
from msprobe.core.compare.metrics import tensor_metrics
from msprobe.core.compare.pipeline import compare_dumps
from msprobe.core.compare.run import compare
from msprobe.core.compare.tables import TENSOR_COLUMNS, tensor_loader
from msprobe.core.dump.reader import read_dump
from msprobe.pytorch import PrecisionDebugger
from msprobe.pytorch.tensor_io import load_pt

FIXTURES = REFERENCE_DUMPS / "pytorch"


def fixture_json(kind, step=0):
    return FIXTURES / kind / f"step{step}" / "rank" / "dump.json"


@pytest.fixture(scope="module")
def our_dumps(tmp_path_factory):
    root = tmp_path_factory.mktemp("ours")
    for task, level in (("statistics", "L1"), ("statistics", "mix"), ("tensor", "L1")):
        path = root / f"{task}_{level}"
        train_fixture_net(
            lambda model, p=path, t=task, lv=level: PrecisionDebugger(task=t, level=lv, dump_path=str(p), model=model)
        )
    return root


@pytest.mark.parametrize("kind", ["statistics_L1", "statistics_mix", "tensor_L1"])
def test_ours_and_the_reference_compare_clean_both_ways(our_dumps, tmp_path, kind):
    ours = our_dumps / kind / "step0" / "rank" / "dump.json"
    for npu, bench in ((ours, fixture_json(kind)), (fixture_json(kind), ours)):
        summary = compare({"npu_json_path": str(npu), "bench_json_path": str(bench)}, tmp_path / npu.parent.name)
        assert summary.verdict == "PASS", summary.line()
        assert summary.mode == ("tensor" if kind.startswith("tensor") else "statistics")
        table = read_dump(npu)  # the only unmatched rows are the reference's own view_as artefacts
        csv = sorted((tmp_path / npu.parent.name).glob("compare_result_*.csv"))[-1]
        import pandas as pd

        result = pd.read_csv(csv, keep_default_na=False)
        unmatched = result[(result["NPU Name"] == "N/A") | (result["Bench Name"] == "N/A")]
        names = pd.concat([unmatched["NPU Name"], unmatched["Bench Name"]])
        assert all(name == "N/A" or name.startswith("Tensor.view_as.") for name in names), table.path


def test_fixture_steps_metrics_against_numpy(tmp_path):
    npu, bench = read_dump(fixture_json("tensor_L1", 1)), read_dump(fixture_json("tensor_L1", 0))
    result = compare_dumps(npu, bench, load=tensor_loader({".pt": load_pt}))
    assert result.mode == "tensor" and list(result.table.columns) == [*TENSOR_COLUMNS, "Data_name"]
    table = result.table.set_index("NPU Name")
    checked = 0
    for name in (
        "Functional.conv2d.0.forward.output.0",
        "Functional.linear.0.forward.input.1",
        "Functional.relu.0.backward.input.0",
    ):
        data_name = table.loc[name, "Data_name"]
        a = torch.load(npu.tensor_dir() / data_name, weights_only=True).double().numpy().ravel()
        b = torch.load(bench.tensor_dir() / data_name, weights_only=True).double().numpy().ravel()
        cosine = a @ b / (np.linalg.norm(a) * np.linalg.norm(b))
        assert table.loc[name, "Cosine"] == pytest.approx(cosine, rel=1e-9)
        assert table.loc[name, "MaxAbsErr"] == pytest.approx(np.abs(a - b).max(), rel=1e-9)
        checked += 1
    assert checked == 3
    # the stale dump_data_dir ('./dump_tensor_L1/...') was ignored: files were found next to dump.json
    assert npu.dump_data_dir.startswith("./dump_tensor_L1") and npu.tensor_dir() == npu.folder / "dump_tensor_data"


def test_metric_special_cases():
    assert tensor_metrics(np.ones(3), np.ones(4)).message.startswith("Shape of NPU and bench")
    assert "0-d" in tensor_metrics(np.array(1.0), np.array(1.5)).message
    assert tensor_metrics(np.array([np.inf, 1.0]), np.array([1.0, 1.0])).message.startswith("The position of inf")
    same = tensor_metrics(np.array([np.nan, 2.0]), np.array([np.nan, 2.0]))
    assert same.cosine == 1.0 and same.max_abs_err == 0.0
    assert "empty" in tensor_metrics(np.zeros(0), np.zeros(0)).message
    half = tensor_metrics(np.array([1.0, 2.0], dtype=np.float16), np.array([1.0, 2.001]))
    assert half.max_abs_err == pytest.approx(0.001, rel=1e-3)


def test_injected_error_is_the_first_node_of_the_advisor(tmp_path):
    for leaky, name in ((False, "bench"), (True, "npu")):
        train_mixed_net(
            lambda model, n=name: PrecisionDebugger(
                task="tensor", level="mix", dump_path=str(tmp_path / n), model=model
            ),
            leaky=leaky,
        )
    summary = compare(
        {
            "npu_json_path": str(tmp_path / "npu/step0/rank/dump.json"),
            "bench_json_path": str(tmp_path / "bench/step0/rank/dump.json"),
        },
        tmp_path / "out",
    )
    assert summary.diagnosis.api == "Functional.leaky_relu.0.forward" and summary.diagnosis.cause == "calls"
    assert summary.verdict == "SUSPICIOUS"
    advisor = next((tmp_path / "out").glob("advisor_*.txt")).read_text()
    assert "Functional.leaky_relu.0.forward" in advisor
    sheet = openpyxl.load_workbook(next((tmp_path / "out").glob("compare_result_*.xlsx"))).active
    colors = {sheet.cell(row=r, column=1).fill.fgColor.rgb for r in range(2, sheet.max_row + 1)}
    assert "FFFF0000" in colors or "FFFFFF00" in colors  # suspicious rows are highlighted


def test_missing_tensor_file_is_a_row_message_not_a_crash(tmp_path, our_dumps):
    import shutil

    copy = tmp_path / "copy"
    shutil.copytree(our_dumps / "tensor_L1" / "step0" / "rank", copy)
    (copy / "dump_tensor_data" / "Functional.relu.0.forward.output.0.pt").unlink()
    npu = read_dump(copy / "dump.json")
    result = compare_dumps(npu, read_dump(fixture_json("tensor_L1")), load=tensor_loader({".pt": load_pt}))
    row = result.table.set_index("NPU Name").loc["Functional.relu.0.forward.output.0"]
    assert "Functional.relu.0.forward.output.0.pt not found" in row["Err_message"]
    assert row["Accuracy Reached or Not"] == "None"
    data = json.loads((copy / "dump.json").read_text())
    assert data["dump_data_dir"].endswith("dump_tensor_data")
