"""Long commands show a progress bar on a terminal, and none in a pipe or a log file."""

import json
import shutil
import subprocess
import sys

import pytest
from repo_paths import REFERENCE_DUMPS
from terminal import on_a_terminal

STATS_L1 = REFERENCE_DUMPS / "pytorch" / "statistics_L1"


def _ranks(tmp_path, count=3):
    for side in ("npu", "bench"):
        for rank in range(count):
            shutil.copytree(STATS_L1 / "step0" / "rank", tmp_path / side / "step0" / f"rank{rank}")
    spec = tmp_path / "compare.json"
    spec.write_text(
        json.dumps({"npu_path": str(tmp_path / "npu" / "step0"), "bench_path": str(tmp_path / "bench" / "step0")})
    )
    return spec


MSPROBE = [sys.executable, "-m", "msprobe.cli.main"]


@pytest.mark.parametrize(
    "arguments, bar",
    [
        (["compare", "-i", "{spec}", "-o", "{out}", "-c"], "ranks: "),
        (["graph", "-i", "{spec}", "-o", "{out}"], "graphs: "),
    ],
)
def test_a_multi_rank_command_shows_a_bar_on_a_terminal_only(tmp_path, arguments, bar):
    spec = _ranks(tmp_path)
    command = [*MSPROBE, *(a.format(spec=spec, out=tmp_path / "out") for a in arguments)]
    shown = on_a_terminal(command, tmp_path)
    command = [*MSPROBE, *(a.format(spec=spec, out=tmp_path / "out2") for a in arguments)]
    assert bar in shown and "/3 [" in shown  # a bar over the three ranks
    piped = subprocess.run(command, cwd=tmp_path, capture_output=True, text=True)
    assert piped.returncode == 0, piped.stderr
    assert bar not in piped.stdout + piped.stderr


MIX = REFERENCE_DUMPS / "pytorch" / "statistics_mix"


def _pair(tmp_path):
    spec = tmp_path / "compare.json"
    spec.write_text(json.dumps({"npu_path": str(MIX / "step0" / "rank"), "bench_path": str(MIX / "step1" / "rank")}))
    return spec


def test_a_graph_says_what_it_is_doing_while_its_bar_stands_still(tmp_path):
    """One graph is one step of its bar: reading, matching, the answer and the files are noted beside it."""
    spec = _pair(tmp_path)
    shown = on_a_terminal([*MSPROBE, "graph", "-i", str(spec), "-o", str(tmp_path / "out")], tmp_path)
    notes = ["reading ", "matching and scoring 27 nodes", "writing the .vis", "finding where the runs part ways",
             "writing the page"]  # fmt: skip
    positions = [shown.find(note) for note in notes]
    assert -1 not in positions and positions == sorted(positions), shown
    piped = subprocess.run([*MSPROBE, "graph", "-i", str(spec), "-o", str(tmp_path / "out2")], capture_output=True,
                           text=True)  # fmt: skip
    assert piped.returncode == 0 and "matching and scoring" not in piped.stdout + piped.stderr


def test_first_divergence_says_it_is_looking_after_the_compare(tmp_path):
    spec = _pair(tmp_path)
    command = [*MSPROBE, "compare", "-i", str(spec), "-o", str(tmp_path / "out"), "--first-divergence"]
    shown = on_a_terminal(command, tmp_path, expected_status=1)  # the runs differ: SUSPICIOUS
    assert "finding where the runs part ways" in shown
    assert shown.index("finding where the runs part ways") < shown.index("SUSPICIOUS")
