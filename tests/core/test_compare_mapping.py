"""Cross-framework and custom name mappings, and merge_result."""

import json
import shutil

import pandas as pd
import pytest
from click.testing import CliRunner
from repo_paths import REFERENCE_DUMPS

from msprobe.cli.main import cli
from msprobe.core.compare.mapping import NameMapper, default_api_mapping
from msprobe.core.compare.run import compare, compare_distributed
from msprobe.core.errors import DataFileError


def tensor(value, shape=(2, 3)):
    return {
        "type": "x.Tensor",
        "dtype": "float32",
        "shape": list(shape),
        "Max": value,
        "Min": -value,
        "Mean": 0.0,
        "Norm": value * 2,
    }


def write_dump(folder, framework, data):
    folder.mkdir(parents=True, exist_ok=True)
    header = {"task": "statistics", "level": "mix", "framework": framework, "dump_data_dir": None}
    (folder / "dump.json").write_text(json.dumps({**header, "data": data}))
    return folder / "dump.json"


@pytest.fixture
def ms_and_pt(tmp_path):
    ms = write_dump(
        tmp_path / "ms",
        "mindspore",
        {
            "Functional.abs.0.forward": {"input_args": [tensor(1.0)], "input_kwargs": {}, "output": [tensor(1.0)]},
            "Cell.fc.Dense.forward.0": {"input_args": [tensor(2.0)], "input_kwargs": {}, "output": [tensor(3.0)]},
            "Cell.net.attention.qkv_proj.Dense.forward.0": {"input_args": [tensor(4.0)], "output": [tensor(5.0)]},
            "Functional.matmul.0.forward": {"input_args": [tensor(6.0), tensor(7.0)], "output": [tensor(8.0)]},
        },
    )
    pt = write_dump(
        tmp_path / "pt",
        "pytorch",
        {
            "Torch.abs.0.forward": {"input_args": [tensor(1.0)], "input_kwargs": {}, "output": [tensor(1.0)]},
            "Module.fc.Linear.forward.0": {"input_args": [tensor(2.0)], "input_kwargs": {}, "output": [tensor(3.0)]},
            "Module.net.self_attention.query_key_value.Dense.forward.0": {
                "input_args": [tensor(4.0)],
                "output": [tensor(5.0)],
            },
            "Torch.mm.0.forward": {"input_args": [tensor(7.0), tensor(6.0)], "output": [tensor(8.0)]},
        },
    )
    return ms, pt


def unmatched(summary_files):
    csv = next(p for p in summary_files if p.suffix == ".csv")
    table = pd.read_csv(csv, keep_default_na=False)
    return table[(table["NPU Name"] == "N/A") | (table["Bench Name"] == "N/A")]


def test_default_table_applies_when_frameworks_differ(ms_and_pt, tmp_path):
    ms, pt = ms_and_pt
    summary = compare({"npu_json_path": str(ms), "bench_json_path": str(pt)}, tmp_path / "out")
    rows = unmatched(summary.files)
    names = set(rows["NPU Name"]) | set(rows["Bench Name"])
    assert "Functional.abs.0.forward.input.0" not in names  # mapped to Torch.abs by the built-in table
    assert "Cell.fc.Dense.forward.0.input.0" in names  # Dense vs Linear needs -cm
    assert default_api_mapping()["Functional.abs"] == "Torch.abs"


def test_custom_api_cell_and_layer_mappings(ms_and_pt, tmp_path):
    ms, pt = ms_and_pt
    (tmp_path / "api.yaml").write_text(
        "- ms_api: Functional.matmul\n  pt_api: Torch.mm\n  ms_args: [0, 1]\n  pt_args: [1, 0]\n"
        "  ms_outputs: [0]\n  pt_outputs: [0]\n"
    )
    (tmp_path / "cell.yaml").write_text("fc.Dense: fc.Linear\n")
    (tmp_path / "layer.yaml").write_text("Attention:\n  qkv_proj: query_key_value\nNet:\n  attention: self_attention\n")
    mappings = {
        "api_mapping": tmp_path / "api.yaml",
        "cell_mapping": tmp_path / "cell.yaml",
        "layer_mapping": tmp_path / "layer.yaml",
    }
    summary = compare({"npu_json_path": str(ms), "bench_json_path": str(pt)}, tmp_path / "out", mappings=mappings)
    assert summary.unmatched == 0 and summary.verdict == "PASS"


def test_data_mapping_within_one_framework(tmp_path):
    a = write_dump(tmp_path / "a", "pytorch", {"Torch.x.0.forward": {"input_args": [tensor(1.0)], "output": []}})
    b = write_dump(tmp_path / "b", "pytorch", {"Torch.y.0.forward": {"input_args": [tensor(1.0)], "output": []}})
    (tmp_path / "dm.yaml").write_text("Torch.x.0.forward.input.0: Torch.y.0.forward.input.0\n")
    plain = compare({"npu_json_path": str(a), "bench_json_path": str(b)}, tmp_path / "o1")
    mapped = compare(
        {"npu_json_path": str(a), "bench_json_path": str(b)},
        tmp_path / "o2",
        mappings={"data_mapping": tmp_path / "dm.yaml"},
    )
    assert plain.unmatched == 2 and mapped.unmatched == 0


def test_bad_mapping_files_name_the_file(tmp_path):
    (tmp_path / "bad.yaml").write_text("- ms_api: Functional.abs\n")
    with pytest.raises(DataFileError, match="bad.yaml: item 0: needs ms_api and pt_api"):
        NameMapper(api_mapping=tmp_path / "bad.yaml")
    with pytest.raises(DataFileError, match="cell_mapping file not found"):
        NameMapper(cell_mapping=tmp_path / "none.yaml")


def test_cli_mapping_flags(ms_and_pt, tmp_path):
    ms, pt = ms_and_pt
    spec = tmp_path / "compare.json"
    spec.write_text(json.dumps({"npu_path": str(ms), "bench_path": str(pt)}))
    (tmp_path / "cell.yaml").write_text("fc.Dense: fc.Linear\n")
    result = CliRunner().invoke(
        cli, ["compare", "-i", str(spec), "-o", str(tmp_path / "o"), "-am", "-cm", str(tmp_path / "cell.yaml")]
    )
    assert result.exit_code == 0, result.output
    table = pd.read_csv(next((tmp_path / "o").glob("compare_result_*.csv")), keep_default_na=False).set_index(
        "NPU Name"
    )
    assert table.loc["Cell.fc.Dense.forward.0.input.0", "Bench Name"] == "Module.fc.Linear.forward.0.input.0"
    assert table.loc["Functional.abs.0.forward.output.0", "Bench Name"] == "Torch.abs.0.forward.output.0"


def test_merge_result(tmp_path):
    source = REFERENCE_DUMPS / "pytorch" / "statistics_L1"
    for side, step in (("npu", "step1"), ("bench", "step0")):
        for rank in ("rank0", "rank1"):
            shutil.copytree(source / step / "rank", tmp_path / side / rank)
    compare_distributed(tmp_path / "npu", tmp_path / "bench", tmp_path / "results")
    (tmp_path / "merge.yaml").write_text(
        "api:\n- Functional.linear\n- Torch.ones_like.0.forward\ncompare_index:\n- Max diff\n- L2norm diff\n"
    )
    result = CliRunner().invoke(
        cli,
        [
            "merge_result",
            "-i",
            str(tmp_path / "results"),
            "-o",
            str(tmp_path / "merged"),
            "-config",
            str(tmp_path / "merge.yaml"),
        ],
    )
    assert result.exit_code == 0, result.output
    workbook = next((tmp_path / "merged").glob("multi_ranks_compare_merge_*.xlsx"))
    sheets = pd.read_excel(workbook, sheet_name=None)
    assert list(sheets) == ["Max diff", "L2norm diff"]
    table = sheets["Max diff"].set_index("NPU Name")
    assert list(table.columns) == ["rank0", "rank1"]
    assert any(name.startswith("Functional.linear.0.forward") for name in table.index)
    assert all(name.startswith(("Functional.linear.", "Torch.ones_like.0.forward")) for name in table.index)
    assert table["rank0"].equals(table["rank1"])  # N/A cells (None arguments) included
    (tmp_path / "bad.yaml").write_text("api: [Functional.linear]\ncompare_index: [Cosine]\n")
    bad = CliRunner().invoke(
        cli,
        [
            "merge_result",
            "-i",
            str(tmp_path / "results"),
            "-o",
            str(tmp_path / "m2"),
            "-config",
            str(tmp_path / "bad.yaml"),
        ],
    )
    assert bad.exit_code == 2 and "not a statistics-mode metric" in bad.output
