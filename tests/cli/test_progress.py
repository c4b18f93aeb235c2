"""Long commands show a progress bar on a terminal, and none in a pipe or a log file."""

import json
import shutil
import subprocess
import sys

import pytest
from terminal import on_a_terminal

from paths import REFERENCE_DUMPS

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
