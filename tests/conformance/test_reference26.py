"""mindstudio-probe 26.2.0, the reference's newest release: we read its dumps, and it reads ours.

26.x writes a ``proc{pid}`` folder where there is no rank, groups names sharing a stack in stack.json, and
adds Requires_grad columns to its compare table. Its compare takes the two step folders (-tp/-gp).
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest
from conftest import DRIVER, environment_python, read_table, reference_python
from test_compares_agree import _run_compare, _same_cell


def _python26() -> str:
    return environment_python("MSPROBE_REFERENCE26_PYTHON")


@pytest.fixture(scope="module")
def dump26(tmp_path_factory):
    folder = tmp_path_factory.mktemp("cnn-26")
    run = subprocess.run(
        [_python26(), str(DRIVER), "cnn", "statistics", "L1", str(folder)], capture_output=True, text=True, timeout=600
    )
    assert run.returncode == 0, run.stderr[-3000:]
    return folder / "dump"


def _compare26(npu_step: Path, bench_step: Path, out: Path) -> pd.DataFrame:
    msprobe = str(Path(_python26()).with_name("msprobe"))
    command = [msprobe, "compare", "-tp", str(npu_step), "-gp", str(bench_step), "-o", str(out), "--xlsx"]
    run = subprocess.run(command, capture_output=True, text=True, timeout=600)
    files = sorted(out.glob("compare_result_*.xlsx"))
    assert files, f"26.2.0 compare wrote no table (exit {run.returncode}):\n{run.stdout[-2000:]}{run.stderr[-2000:]}"
    return read_table(files[0])


def _our_compare(npu_step: Path, bench_step: Path, out: Path) -> pd.DataFrame:
    config = out.parent / f"{out.name}.json"
    config.write_text(f'{{"npu_path": "{npu_step}", "bench_path": "{bench_step}"}}')
    run = subprocess.run(
        [str(Path(sys.executable).with_name("msprobe")), "compare", "-i", str(config), "-o", str(out)],
        capture_output=True, text=True, timeout=600,
    )  # fmt: skip
    files = sorted(out.glob("compare_result*.xlsx"))
    assert files, f"our compare wrote no table (exit {run.returncode}):\n{run.stdout[-2000:]}{run.stderr[-2000:]}"
    return read_table(files[0])


def test_we_read_26_dumps_with_its_rows_and_the_1_2_2_verdicts(dump26, tmp_path):
    """26.x judges statistics with a new rule (pass/warning/error); ours is 1.2.2's, so the cells are checked
    against 1.2.2's compare of the same 26.x files, and the rows against 26.x's own table."""
    step0 = next((dump26 / "step0").iterdir())
    assert step0.name.startswith("proc")
    step1 = next((dump26 / "step1").iterdir())
    theirs26 = _compare26(dump26 / "step0", dump26 / "step1", tmp_path / "theirs26")
    ours = _our_compare(dump26 / "step0", dump26 / "step1", tmp_path / "ours")
    assert list(ours["NPU Name"]) == list(theirs26["NPU Name"])
    theirs = _run_compare(reference_python(), step0 / "dump.json", step1 / "dump.json", tmp_path / "theirs122",
                          stack=False)  # fmt: skip
    theirs = theirs.drop(columns=["NPU_Stack_Info"], errors="ignore")  # 1.2.2 adds it when given no stack.json
    assert list(ours.columns) == list(theirs.columns) and len(ours) == len(theirs)
    problems = [
        (index, column)
        for index in range(len(theirs))
        for column, value in theirs.iloc[index].items()
        if not _same_cell(ours.iloc[index][column], value)
    ]
    assert not problems, problems[:20]


def test_26_reads_our_dumps_as_it_reads_1_2_2s(dumps, tmp_path):
    ours, reference = dumps("cnn", "statistics", "L1")
    of_ours = _compare26(ours / "step0", ours / "step1", tmp_path / "ours")
    of_reference = _compare26(reference / "step0", reference / "step1", tmp_path / "reference")
    assert len(of_ours) > 100
    assert list(of_ours["NPU Name"]) == list(of_reference["NPU Name"])
    assert list(of_ours["Result"]) == list(of_reference["Result"])
