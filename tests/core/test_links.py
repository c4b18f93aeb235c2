"""No result is written through a planted link.

Every writer's temporary name is taken over before the writer gets to it: a link to a file the attacker
wants overwritten is planted at the first name the writer draws, and another at the result's own name.
The writer must pass the planted temporary by, replace the link at the result's name with a regular
0o640 file, and leave the linked file as it was.
"""

from __future__ import annotations

import json
import shutil

import numpy as np
import pandas as pd
import pytest
from click.testing import CliRunner
from links import plant_links, regular_results
from repo_paths import REFERENCE_DUMPS

from msprobe.cli.main import cli
from msprobe.core import files as writer_module
from msprobe.core.compare.large import STREAM_ENV
from msprobe.core.errors import DataFileError
from msprobe.core.files import create_private


def _spec(tmp_path, kind, file_name="dump.json"):
    dumps = REFERENCE_DUMPS / "pytorch" / kind
    spec = tmp_path / f"{kind}.json"
    sides = {"npu_path": dumps / "step1" / "rank" / file_name, "bench_path": dumps / "step0" / "rank" / file_name}
    spec.write_text(json.dumps({side: str(path) for side, path in sides.items()}))
    return spec


@pytest.mark.parametrize("streamed", ["always", "never"])
def test_compare_writes_no_result_through_a_link(tmp_path, monkeypatch, streamed):
    planted = plant_links(tmp_path, monkeypatch)
    monkeypatch.setenv(STREAM_ENV, streamed)
    spec = _spec(tmp_path, "statistics_L1")
    result = CliRunner().invoke(cli, ["compare", "-i", str(spec), "-o", str(tmp_path / "out")])
    assert result.exit_code in (0, 1), result.output
    result = CliRunner().invoke(cli, ["compare", "-i", str(spec), "-o", str(tmp_path / "fd"), "--first-divergence"])
    assert result.exit_code in (0, 1), result.output
    written = regular_results(tmp_path, planted, {".csv", ".xlsx", ".txt", ".json"})
    table = pd.read_csv(next(path for path in written if path.suffix == ".csv"))
    assert len(table) > 10


def test_graph_writes_no_page_through_a_link(tmp_path, monkeypatch):
    planted = plant_links(tmp_path, monkeypatch)
    spec = _spec(tmp_path, "statistics_mix", "")
    result = CliRunner().invoke(cli, ["graph", "-i", str(spec), "-o", str(tmp_path / "out")])
    assert result.exit_code == 0, result.output
    regular_results(tmp_path, planted, {".vis", ".html"})


def test_merge_result_writes_no_workbook_through_a_link(tmp_path, monkeypatch):
    from msprobe.core.compare.run import compare_distributed

    source = REFERENCE_DUMPS / "pytorch" / "statistics_L1"
    for side, step in (("npu", "step1"), ("bench", "step0")):
        shutil.copytree(source / step / "rank", tmp_path / side / "rank0")
    compare_distributed(tmp_path / "npu", tmp_path / "bench", tmp_path / "results")
    (tmp_path / "merge.yaml").write_text("api: [Functional.linear]\ncompare_index: [Max diff]\n")
    planted = plant_links(tmp_path, monkeypatch)
    arguments = ["merge_result", "-i", str(tmp_path / "results"), "-o", str(tmp_path / "merged")]
    result = CliRunner().invoke(cli, [*arguments, "-config", str(tmp_path / "merge.yaml")])
    assert result.exit_code == 0, result.output
    (workbook,) = regular_results(tmp_path, planted, {".xlsx"})
    assert list(pd.read_excel(workbook, sheet_name=None)) == ["Max diff"]


def test_tensor_files_and_gradient_summaries_are_not_written_through_a_link(tmp_path, monkeypatch):
    from msprobe.core.grad_probe.collect import GradRecord, GradSummaryWriter
    from msprobe.core.tensor_files import load_npy, save_npy

    planted = plant_links(tmp_path, monkeypatch)
    save_npy(np.arange(4.0), tmp_path / "values.npy")
    assert load_npy(tmp_path / "values.npy").tolist() == [0.0, 1.0, 2.0, 3.0]
    writer = GradSummaryWriter(tmp_path / "grad", "L0", [-1.0, 0.0, 1.0])
    writer.write_step(0, 0, [GradRecord("w", [2], 1.0, -1.0, 1.5, md5="00ff")])
    writer.close()
    regular_results(tmp_path, planted, {".npy", ".csv"})


def test_precision_compare_writes_no_result_through_a_link(tmp_path, monkeypatch):
    from msprobe.core.precheck.metrics import DETAIL_COLUMNS
    from msprobe.core.precheck.precision_compare import api_precision_compare

    planted = plant_links(tmp_path, monkeypatch)
    row = dict.fromkeys(DETAIL_COLUMNS, "N/A")
    row.update({DETAIL_COLUMNS[0]: "Torch.add.0.forward.output.0"})
    for name in ("npu.csv", "gpu.csv"):
        pd.DataFrame([row], columns=DETAIL_COLUMNS).to_csv(tmp_path / name, index=False, encoding="utf-8-sig")
    result, details, _ = api_precision_compare(tmp_path / "npu.csv", tmp_path / "gpu.csv", tmp_path / "out")
    written = regular_results(tmp_path, planted, {".csv"})
    assert {result, details} <= written


def test_a_temporary_name_taken_every_time_is_one_clear_error(tmp_path, monkeypatch):
    taken = tmp_path / ".taken"
    taken.write_text("")
    monkeypatch.setattr(writer_module, "temporary_name", lambda path: taken)
    with pytest.raises(DataFileError, match="every name was taken"):
        create_private(tmp_path / "result.csv")
