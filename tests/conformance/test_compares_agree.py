"""`msprobe compare` against the reference tool's compare, on the zoo's dumps, in both directions.

Each pair (step 0 against step 1 of one run) is compared by both tools'
command lines as a user runs them: the reference's dumps, our dumps, and a
pair with one side from each tool (each tool then reads the other's file).
The result tables must hold the same rows in the same order and the same
cells: names, dtypes, shapes, every difference and metric (numbers within
1e-6), the verdicts (Result, Accuracy Reached or Not) and Err_message. The
documented differences: bench values with no NPU partner are listed at the
end of ours (the reference leaves them out), each with N/A for its NPU name;
and where one side comes from each tool, a handed-back call's backward
(written at another place by each) is paired by ours and not by the
reference. Ours runs a second time streaming the dumps (docs/compare.md#large-dumps)
on the pair with one side from each tool: its table must equal the first.
"""

from __future__ import annotations

import json
import math
import sys
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from agreement import HANDED_BACK
from conftest import read_table, reference_python, run_msprobe

# each level and each task at least once, on the architectures whose tables differ in kind; a pair that held
# the same rows as another in another model (a second L1 language model, a second L1 md5 or tensor table) is
# left out: the reference's compare of the zoo's larger dumps takes up to a minute each
PAIRS = [
    ("attention", "statistics", "L1"),
    ("moe", "statistics", "L1"),
    ("cnn", "statistics", "mix"),
    ("llama", "statistics", "mix"),  # holds the L1 rows of the language model
    ("vit", "statistics", "L0"),
    ("moe", "md5", "L1"),  # experts called a different number of times per step: NPU values with no partner
    ("llama", "md5", "mix"),
    ("moe", "tensor", "L0"),
    ("mamba", "tensor", "L1"),  # F.conv1d(..., weight=, bias=): keyword tensors, rows named after their files
]
SIDES = ("reference", "ours", "ours-vs-reference")


def _step(root: Path, step: int) -> Path:
    return root / f"step{step}" / "rank" / "dump.json"


def _run_compare(
    python: str,
    npu: Path,
    bench: Path,
    out: Path,
    stack: bool = True,
    env: dict[str, str] | None = None,
    flags: tuple[str, ...] = (),
) -> pd.DataFrame:
    """``msprobe compare`` of the tool of ``python``'s environment, as a user runs it. ``stack``: compare.json
    names the stack.json (the column then comes with ``-s`` alone); without it, both tools add the column
    because a stack.json lies beside the NPU dump."""
    out.mkdir(parents=True)
    config = out / "compare.json"
    spec = {"npu_path": str(npu), "bench_path": str(bench)}
    if stack:
        spec["stack_path"] = str(npu.with_name("stack.json"))
    config.write_text(json.dumps(spec))
    arguments = ["-f", "pytorch", "compare", "-i", str(config), "-o", str(out), *flags]
    run = run_msprobe(python, arguments, out.parent / f"{out.name}.log", env)
    results = sorted(out.glob("compare_result_*.xlsx"))
    assert results, f"{python} wrote no table (exit {run.returncode}):\n{run.stdout[-2000:]}{run.stderr[-2000:]}"
    return read_table(results[0])


def _written_in_another_order(name: str) -> bool:
    """A handed-back call's backward, which the two tools write at different places (docs/differences.md): the
    reference pairs calls in the order it meets them and leaves such an entry unmatched; ours pairs it by name."""
    return name.startswith(HANDED_BACK) and ".backward." in name


def _paired_though_different(ours: pd.Series, theirs: pd.Series) -> bool:
    """md5 mode, docs/differences.md: the reference pairs an entry with no inputs (parameters_grad) only when
    its CRC-32 values are equal, so gradients that differ are left unmatched; ours pairs them by name and says
    "Different"."""
    return (
        "MD5" in " ".join(map(str, theirs.index))
        and ".parameters_grad." in str(theirs.iloc[0])
        and theirs["Bench Name"] == "N/A"
        and ours["Bench Name"] == theirs.iloc[0]
        and ours["Result"] == "Different"
    )


def _same_cell(ours: object, theirs: object) -> bool:
    if str(ours) == str(theirs):
        return True
    try:
        a, b = float(str(ours).rstrip("%")), float(str(theirs).rstrip("%"))
    except ValueError:
        return False
    if math.isnan(a) or math.isnan(b):
        return math.isnan(a) and math.isnan(b)
    return math.isclose(a, b, rel_tol=1e-6, abs_tol=1e-12)


@pytest.mark.parametrize("side", SIDES)
@pytest.mark.parametrize(("model", "task", "level"), PAIRS, ids=["-".join(pair) for pair in PAIRS])
def test_our_compare_table_is_the_references(dumps, tmp_path, model, task, level, side):
    ours_root, reference_root = dumps(model, task, level)
    npu, bench = {
        "reference": (_step(reference_root, 0), _step(reference_root, 1)),
        "ours": (_step(ours_root, 0), _step(ours_root, 1)),
        "ours-vs-reference": (_step(ours_root, 0), _step(reference_root, 1)),
    }[side]
    theirs = _run_compare(reference_python(), npu, bench, tmp_path / "reference")
    ours = _run_compare(sys.executable, npu, bench, tmp_path / "ours")
    # the streamed compare (docs/compare.md#large-dumps) writes the same table; checked where each tool wrote
    # one side, so that both tools' files go through the streaming reader
    if task != "tensor" and side == "ours-vs-reference":
        streamed = _run_compare(
            sys.executable, npu, bench, tmp_path / "streamed", env={"MSPROBE_COMPARE_STREAM": "always"}
        )
        pd.testing.assert_frame_equal(streamed, ours)
    problems = [
        problem
        for index, problem in _table_problems(ours, theirs)
        if not (side == "ours-vs-reference" and _written_in_another_order(theirs.iloc[index, 0]))
        and not _paired_though_different(ours.iloc[index], theirs.iloc[index])
    ]
    extra = ours.iloc[len(theirs) :]
    assert (extra["NPU Name"] == "N/A").all(), "rows beyond the reference's must be bench values left unmatched"
    assert not problems, f"{len(problems)} cells differ:\n" + "\n".join(problems[:30])
    if model == "mamba" and side == "ours-vs-reference":
        _every_npu_value_is_paired(ours, theirs, npu)


def _every_npu_value_is_paired(ours: pd.DataFrame, theirs: pd.DataFrame, npu: Path) -> None:
    """Mamba passes F.conv1d its weight and bias as keywords: each tool's compare of one tool's tensor dump
    against the other's pairs every NPU value (the reference names those rows after their files)."""
    keywords = [name for name in json.loads(npu.read_text())["data"] if name.startswith("Functional.conv1d.")]
    assert keywords, "the model no longer calls F.conv1d"
    for label, table in (("reference", theirs), ("ours", ours)):
        unmatched = table[(table["NPU Name"] != "N/A") & (table["Bench Name"] == "N/A")]
        assert unmatched.empty, f"{label}: {unmatched['NPU Name'].tolist()[:10]}"
        assert table["NPU Name"].str.contains(r"^Functional\.conv1d\.\d+\.forward\.kwargs\.weight$").any(), label


def _table_problems(ours: pd.DataFrame, theirs: pd.DataFrame) -> list[tuple[int, str]]:
    """Each cell of the reference's rows that ours does not hold, with its row: the texts compared over the
    whole table at once, and only the cells whose texts differ then read as numbers (a table holds up to
    50,000 cells, and a cell by cell walk of pandas rows took a quarter of the session)."""
    assert list(ours.columns) == list(theirs.columns)
    assert len(ours) >= len(theirs) > 0
    ours_cells = ours.iloc[: len(theirs)].to_numpy()
    theirs_cells = theirs.to_numpy()
    texts_differ = ours_cells.astype(str) != theirs_cells.astype(str)
    return [
        (
            index,
            f"row {index} {theirs_cells[index, 0]} {theirs.columns[column]}: "
            f"ours {ours_cells[index, column]!r}, reference {theirs_cells[index, column]!r}",
        )
        for index, column in zip(*np.nonzero(texts_differ))
        if not _same_cell(ours_cells[index, column], theirs_cells[index, column])
    ]


@pytest.mark.parametrize(("stack", "flags"), [(False, ()), (True, ("-s",))], ids=["beside", "stack_path-s"])
@pytest.mark.parametrize("side", ["reference", "ours"])
def test_the_stack_column_is_the_references(dumps, tmp_path, stack, flags, side):
    """NPU_Stack_Info: present with no stack_path (a stack.json lies beside the NPU dump), or with stack_path and
    -s; the frames' list text on a call's first input row, None on its others: the same cells as the reference."""
    ours_root, reference_root = dumps("cnn", "statistics", "mix")
    root = reference_root if side == "reference" else ours_root
    npu, bench = _step(root, 0), _step(root, 1)
    theirs = _run_compare(reference_python(), npu, bench, tmp_path / "reference", stack=stack, flags=flags)
    ours = _run_compare(sys.executable, npu, bench, tmp_path / "ours", stack=stack, flags=flags)
    assert "NPU_Stack_Info" in theirs.columns
    assert (theirs["NPU_Stack_Info"].str.startswith("['File ")).sum() > 5
    problems = [problem for _, problem in _table_problems(ours, theirs)]
    assert not problems, f"{len(problems)} cells differ:\n" + "\n".join(problems[:30])


def test_tensor_dumps_with_keyword_tensors_match_across_tools(dumps, tmp_path):
    """The other direction of the mamba pair above (the reference's dump against ours): every NPU value paired,
    by each tool."""
    ours_root, reference_root = dumps("mamba", "tensor", "L1")
    npu, bench = _step(reference_root, 0), _step(ours_root, 1)
    theirs = _run_compare(reference_python(), npu, bench, tmp_path / "reference")
    ours = _run_compare(sys.executable, npu, bench, tmp_path / "ours")
    _every_npu_value_is_paired(ours, theirs, npu)
