"""``msprobe compare`` of every layout a path may have, and one answer per command.

A compare.json may name two dump.json files, two step folders (rank0, rank1, ...) or two whole ``dump_path``
folders (step0/rank, step1/rank, ...), as docs/first_divergence.md says; the summary's verdict, the exit code,
the advisor file and first_divergence_*.json all carry the same answer, whatever the dumps' size.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
from click.testing import CliRunner
from repo_paths import REFERENCE_DUMPS

from msprobe.cli.main import cli

STATS_L1 = REFERENCE_DUMPS / "pytorch" / "statistics_L1"


def run_cli(*arguments: str):
    return CliRunner().invoke(cli, list(arguments))


def compare_json(tmp_path: Path, npu: Path, bench: Path) -> Path:
    spec = tmp_path / "compare.json"
    spec.write_text(json.dumps({"npu_path": str(npu), "bench_path": str(bench)}))
    return spec


def dump_path(root: Path, steps: dict[str, str], ranks: tuple[str, ...] = ("rank",)) -> Path:
    """A whole dump_path: ``steps`` maps a step folder to the fixture step whose dump it holds, in every rank."""
    for step, source in steps.items():
        for rank in ranks:
            shutil.copytree(STATS_L1 / source / "rank", root / step / rank)
    return root


@pytest.mark.parametrize("ranks", [("rank",), ("rank0", "rank1")], ids=["one process", "two ranks"])
def test_a_whole_dump_path_is_compared_step_by_step(tmp_path, ranks):
    """Step 1 of the run to check holds another step's values: that step is named, the other passes."""
    npu = dump_path(tmp_path / "npu", {"step0": "step0", "step1": "step1"}, ranks)
    bench = dump_path(tmp_path / "bench", {"step0": "step0", "step1": "step0"}, ranks)
    spec = compare_json(tmp_path, npu, bench)
    result = run_cli("compare", "-i", str(spec), "-o", str(tmp_path / "out"), "--first-divergence")
    assert result.exit_code == 1, result.output
    lines = result.output.splitlines()
    rank_words = [f" rank {rank[4:]}" if rank[4:] else "" for rank in ranks]
    for words in rank_words:
        assert any(line.startswith(f"step 0{words}: PASS") for line in lines), result.output
        assert any(line.startswith(f"step 1{words}: SUSPICIOUS") for line in lines), result.output
    assert lines[-1].startswith(f"overall: SUSPICIOUS: {len(ranks)} of {2 * len(ranks)} dumps pass")
    # each step's results in a folder of its own, under the names a one-step compare gives them
    for step in ("step0", "step1"):
        names = sorted(path.name.rsplit("_", 1)[0] for path in (tmp_path / "out" / step).glob("*.csv"))
        expected = [f"compare_result_{r}" if r != "rank" else "compare_result" for r in ranks]
        assert names == sorted(expected)
    [written] = (tmp_path / "out").glob("first_divergence_*.json")
    answer = json.loads(written.read_text())
    assert answer["verdict"] == "divergence" and answer["step"] == 1


def test_the_docs_single_process_run_layout_compares_as_one_dump_per_step(tmp_path):
    """What `msprobe run` writes for one process: dump_path/step0/rank; the same run twice passes."""
    npu = dump_path(tmp_path / "npu", {"step0": "step0"})
    bench = dump_path(tmp_path / "bench", {"step0": "step0"})
    result = run_cli("compare", "-i", str(compare_json(tmp_path, npu, bench)), "-o", str(tmp_path / "out"))
    assert result.exit_code == 0, result.output
    assert any(line.startswith("step 0: PASS") for line in result.output.splitlines())
    assert len(list((tmp_path / "out" / "step0").glob("compare_result_*.xlsx"))) == 1


def test_a_lone_proc_folder_of_each_run_pairs_though_their_pids_differ(tmp_path):
    """mindstudio-probe 26.x writes proc{pid} where there is no rank; two runs have two pids."""
    shutil.copytree(STATS_L1 / "step0" / "rank", tmp_path / "npu" / "step0" / "proc101")
    shutil.copytree(STATS_L1 / "step0" / "rank", tmp_path / "bench" / "step0" / "proc202")
    spec = compare_json(tmp_path, tmp_path / "npu", tmp_path / "bench")
    result = run_cli("compare", "-i", str(spec), "-o", str(tmp_path / "out"))
    assert result.exit_code == 0 and any(line.startswith("step 0: PASS") for line in result.output.splitlines())


def test_rank_folders_with_nothing_in_common_are_one_clear_error(tmp_path):
    shutil.copytree(STATS_L1 / "step0" / "rank", tmp_path / "npu" / "rank0")
    shutil.copytree(STATS_L1 / "step0" / "rank", tmp_path / "bench" / "rank1")
    spec = compare_json(tmp_path, tmp_path / "npu", tmp_path / "bench")
    result = run_cli("compare", "-i", str(spec), "-o", str(tmp_path / "out"))
    assert result.exit_code == 2 and "Traceback" not in result.output
    message = result.output.strip()
    assert "no step or rank folder in common" in message and "rank0" in message and "rank1" in message
    assert not (tmp_path / "out").exists() or not list((tmp_path / "out").iterdir())


def test_one_process_against_two_ranks_is_compared_as_the_global_run(tmp_path):
    """`rank` against `rank0` and `rank1` (a golden run on fewer devices): the two ranks are merged first. Two
    copies of one dump, with no layout recorded, merge into that dump: the same values."""
    shutil.copytree(STATS_L1 / "step0" / "rank", tmp_path / "npu" / "rank")
    for rank in ("rank0", "rank1"):
        shutil.copytree(STATS_L1 / "step0" / "rank", tmp_path / "bench" / rank)
    spec = compare_json(tmp_path, tmp_path / "npu", tmp_path / "bench")
    result = run_cli("compare", "-i", str(spec), "-o", str(tmp_path / "out"))
    assert result.exit_code == 0, result.output
    [line] = [line for line in result.output.splitlines() if line.startswith("PASS: ")]
    assert "0 unmatched" in line and "ranks merged: 1 rank against 2: each step's ranks merged" in result.output
    assert (tmp_path / "out" / "merged_bench" / "rank" / "dump.json").is_file()


# one answer per command, whatever the dumps' size


def summary(mean: float) -> dict:
    return {"type": "torch.Tensor", "dtype": "torch.float32", "shape": [4, 8], "Max": mean + 1.0,
            "Min": mean - 1.0, "Mean": mean, "Norm": abs(mean) * 10 + 3.0, "requires_grad": False}  # fmt: skip


def scaled_chain(folder: Path, calls: int, changed_at: int) -> Path:
    """``x = x * f`` ``calls`` times; the call at ``changed_at`` multiplies by 1.001 instead of 1.0 when it is not
    negative. The scalar differs and the tensors' statistics only by 0.1 per mille: below every threshold."""
    data, mean = {}, 1.0
    for index in range(calls):
        factor = 1.001 if index == changed_at else 1.0
        out = mean * factor
        data[f"Tensor.__mul__.{index}.forward"] = {
            "input_args": [summary(mean), {"type": "float", "value": factor}], "input_kwargs": {},
            "output": [summary(out)],
        }  # fmt: skip
        mean = out
    folder.mkdir(parents=True)
    header = {"task": "statistics", "level": "L1", "framework": "pytorch", "dump_data_dir": None}
    (folder / "dump.json").write_text(json.dumps({**header, "data": data}))
    return folder


@pytest.mark.parametrize("stream", ["always", "never"])
def test_the_verdict_exit_code_and_files_carry_the_diagnosis_of_first_divergence(tmp_path, monkeypatch, stream):
    """A compare diagnoses on its own up to a size (here made tiny, as for two dumps of 35 MB each); asked for
    with --first-divergence, the diagnosis goes further, and the verdict must then rest on it, not say PASS
    beside a line naming where the runs part ways."""
    from msprobe.core.compare import run

    monkeypatch.setattr(run, "COMPARE_DIAGNOSED_BYTES", 1024)
    monkeypatch.setenv("MSPROBE_COMPARE_STREAM", stream)
    npu = scaled_chain(tmp_path / "npu", 200, changed_at=120)
    bench = scaled_chain(tmp_path / "bench", 200, changed_at=-1)
    spec = compare_json(tmp_path, npu / "dump.json", bench / "dump.json")
    plain = run_cli("compare", "-i", str(spec), "-o", str(tmp_path / "plain"))
    assert "not diagnosed" in plain.output and "0 suspicious" in plain.output  # the case: too large, no finding
    result = run_cli("compare", "-i", str(spec), "-o", str(tmp_path / "out"), "--first-divergence")
    first, second = result.output.splitlines()[:2]
    assert first.startswith("SUSPICIOUS: ") and "not diagnosed" not in first, result.output
    assert "Tensor.__mul__.120.forward" in first and second.startswith("the runs part ways at Tensor.__mul__.120")
    assert result.exit_code == 1
    [advisor] = (tmp_path / "out").glob("advisor_*.txt")
    [written] = (tmp_path / "out").glob("first_divergence_*.json")
    answer = json.loads(written.read_text())
    assert answer["verdict"] == "divergence" and answer["api"] == "Tensor.__mul__.120.forward"
    assert "Tensor.__mul__.120.forward" in advisor.read_text() and "not diagnosed" not in advisor.read_text()


def test_dumps_beyond_even_the_asked_for_diagnosis_say_so_everywhere_alike(tmp_path, monkeypatch):
    from msprobe.core.compare import run
    from msprobe.core.diagnosis import runs

    monkeypatch.setattr(run, "COMPARE_DIAGNOSED_BYTES", 1024)
    monkeypatch.setattr(runs, "MAX_DIAGNOSED_BYTES", 2048)
    npu = scaled_chain(tmp_path / "npu", 50, changed_at=20)
    bench = scaled_chain(tmp_path / "bench", 50, changed_at=-1)
    spec = compare_json(tmp_path, npu / "dump.json", bench / "dump.json")
    result = run_cli("compare", "-i", str(spec), "-o", str(tmp_path / "out"), "--first-divergence")
    first, second = result.output.splitlines()[:2]
    assert first.startswith("PASS: ") and "not diagnosed" in first and "--first-divergence" not in first
    assert "part ways at" not in second and "not diagnosed" in second
    [written] = (tmp_path / "out").glob("first_divergence_*.json")
    assert json.loads(written.read_text())["verdict"] == "uncertain"
    assert result.exit_code == 0
