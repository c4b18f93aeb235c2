"""The reference tool reads the dumps of a sharded run, and the merged global run, as it reads any dump.

A two-rank run records more than the reference writes (``Sum``, ``SumSq``, ``parameter``, a DTensor's ``shard``,
the header's ``parallel``); the merged run adds ``merged`` and ``pieces``. The reference's compare must take
them all, pair every row, and write its table.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest
from conftest import read_table, reference_python

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "bench"))
import bench_layouts as bench
from layout_faults import CASES

CASE = next(case for case in CASES if case.name == "mlp.tp.control")


@pytest.fixture(scope="module")
def runs(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("layouts")
    bench.run_cases([CASE], list(bench.MODES), root)
    for mode in bench.MODES:  # the merged runs, as msprobe compare writes them
        bench.score(CASE, mode, root)
    return root


def _reference_table(npu: Path, golden: Path, out: Path) -> pd.DataFrame:
    out.mkdir(parents=True)
    spec = out / "compare.json"
    spec.write_text(json.dumps({"npu_path": str(npu), "bench_path": str(golden)}))
    command = [str(Path(reference_python()).with_name("msprobe")), "-f", "pytorch", "compare", "-i", str(spec)]
    run = subprocess.run([*command, "-o", str(out)], capture_output=True, text=True, timeout=600)
    tables = sorted(out.glob("compare_result_*.xlsx"))
    assert run.returncode == 0 and tables, f"exit {run.returncode}:\n{run.stdout[-2000:]}{run.stderr[-2000:]}"
    return read_table(tables[0])


@pytest.mark.parametrize("mode", bench.MODES)
def test_the_reference_compares_two_ranks_of_our_sharded_run(runs, tmp_path, mode):
    """Rank 1 against rank 0 of one layout: the reference's own use of a multi-rank dump."""
    step = runs / "runs" / f"{CASE.name}.{mode}" / "step0"
    assert "parallel" in json.loads((step / "rank1" / "dump.json").read_text())
    table = _reference_table(step / "rank1" / "dump.json", step / "rank0" / "dump.json", tmp_path / "ranks")
    itself = _reference_table(step / "rank0" / "dump.json", step / "rank0" / "dump.json", tmp_path / "itself")
    assert len(table) == len(itself) > 50 and "N/A" not in set(table["Bench Name"]) | set(table["NPU Name"])


@pytest.mark.parametrize("mode", bench.MODES)
def test_the_reference_compares_the_merged_run_with_the_golden_run(runs, tmp_path, mode):
    golden = runs / "golden" / f"mlp.{mode}" / "step0" / "rank" / "dump.json"
    merged = runs / "compare" / f"{CASE.name}.{mode}" / "merged_npu" / "step0" / "rank" / "dump.json"
    assert "merged" in merged.read_text()
    table = _reference_table(merged, golden, tmp_path / "merged")
    itself = _reference_table(golden, golden, tmp_path / "itself")
    assert len(table) == len(itself) > 50 and "N/A" not in set(table["Bench Name"]) | set(table["NPU Name"])
