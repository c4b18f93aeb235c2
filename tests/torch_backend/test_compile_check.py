"""compile_check: wrong decompositions injected into one op's compilation are named at that op's first FX node,
and models compiled without a fault show none. The full table (more models, both backends) is
bench/bench_compile_check.py."""

from __future__ import annotations

import csv
import sys

import pytest
from click.testing import CliRunner

pytest.importorskip("transformers")

from paths import REPO_ROOT

sys.path.insert(0, str(REPO_ROOT / "bench"))
import compile_faults

from msprobe.cli.main import cli


@pytest.mark.parametrize(("models", "backends"), [(["block", "bert"], ["aot_eager"]), (["block"], ["inductor"])])
def test_injected_compiler_faults_are_named_at_their_node_and_clean_runs_are_not(models, backends):
    rows, right, cases, false = compile_faults.score(models, backends)
    print(f"\n{backends[0]}: {right}/{cases} live faults named at their op's first node; {false} clean runs flagged")
    for row in rows:
        print("  ", row)
    assert cases >= 4 and right == cases and false == 0


SCRIPT = """
import torch

def model_and_inputs():
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.LayerNorm(16), torch.nn.GELU(), torch.nn.Linear(16, 2))
    return model.eval(), (torch.randn(4, 8),)
"""


def test_the_command_writes_a_row_per_node_and_its_answer(tmp_path):
    (tmp_path / "model.py").write_text(SCRIPT)
    result = CliRunner().invoke(
        cli, ["compile_check", "-s", str(tmp_path / "model.py"), "-b", "aot_eager", "-o", str(tmp_path / "out")]
    )
    assert result.exit_code == 0, result.output
    assert "aot_eager: no node departs from eager beyond rounding (4 nodes checked" in result.output
    with open(tmp_path / "out" / "compile_check_aot_eager.csv", newline="") as handle:
        rows = list(csv.DictReader(handle))
    assert [row["Op"] for row in rows] == ["linear", "layer_norm", "gelu", "linear"]
    assert all(row["Result"] == "pass" for row in rows)
    assert [row["Module"] for row in rows] == ["0", "1", "2", "3"]  # the Sequential's layers


@pytest.mark.parametrize(
    ("script", "message"),
    [
        ("x = 1\n", "defines no model_and_inputs()"),
        ("def model_and_inputs():\n    return 3\n", "must return (model, inputs)"),
        (
            "import torch\n"
            "def f(x):\n    return x * 2 if float(x.sum()) > 0 else x\n"
            "def model_and_inputs():\n    return f, (torch.ones(2),)\n",
            "does not compile to one graph",
        ),
    ],
)
def test_a_script_the_check_cannot_use_is_one_clear_error(tmp_path, script, message):
    (tmp_path / "model.py").write_text(script)
    result = CliRunner().invoke(
        cli, ["compile_check", "-s", str(tmp_path / "model.py"), "-b", "aot_eager", "-o", str(tmp_path / "out")]
    )
    assert result.exit_code != 0 and message in result.output and "Traceback" not in result.output
