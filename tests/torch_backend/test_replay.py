"""Replay on faults whose place and kind the test puts there: a weight changed in the module, an upstream
layer changed (other inputs), the module's own argument changed (its computation), no change, and dropout
(a replay that cannot reproduce its own run). Each cause class must come out as the fault's."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
import torch.nn.functional as F
from click.testing import CliRunner
from torch import nn

from msprobe.cli.main import cli
from msprobe.pytorch import PrecisionDebugger, replay_module
from msprobe.pytorch.replay import ReplayError


class Block(nn.Module):
    def __init__(self, eps: float, dropout: float):
        super().__init__()
        self.norm, self.fc1, self.fc2 = nn.LayerNorm(8, eps=eps), nn.Linear(8, 16), nn.Linear(16, 8)
        self.drop = nn.Dropout(dropout)
        self.proj = nn.Linear(8, 8)  # read here without calling it, as attention reads its output projection

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x + self.drop(self.fc2(F.gelu(self.fc1(self.norm(x)))))
        return F.linear(x, self.proj.weight, self.proj.bias)


class Net(nn.Module):
    def __init__(self, eps: float = 1e-5, dropout: float = 0.0):
        super().__init__()
        self.inp, self.block, self.head = nn.Linear(4, 8), Block(eps, dropout), nn.Linear(8, 2)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.head(self.block(self.inp(x)))


def build(fault: str | None) -> Net:
    torch.manual_seed(0)
    model = Net(eps=0.1 if fault == "computation" else 1e-5, dropout=0.5 if fault == "dropout" else 0.0)
    with torch.no_grad():
        if fault == "weights":  # inside the replayed module
            model.block.fc1.weight[0, 0] += 0.5
        elif fault == "inputs":  # upstream of it
            model.inp.weight.mul_(1.1)
        elif fault == "unrecorded_weights":  # a weight no module entry records: found as the call's argument
            model.block.proj.weight[1, 2] += 0.5
    return model


def _run(root: Path, name: str, fault: str | None, task: str = "tensor") -> Net:
    model = build(fault)
    config = root / f"{name}.json"
    config.write_text(json.dumps({"task": task, "level": "mix", "dump_path": str(root / name)}))
    debugger = PrecisionDebugger(config_path=str(config), model=model)
    debugger.start()
    model(torch.randn(5, 4, generator=torch.Generator().manual_seed(1))).sum().backward()
    debugger.stop()
    debugger.step()
    return model


FAULTS = ("weights", "inputs", "computation", "none", "dropout", "unrecorded_weights")


@pytest.fixture(scope="module")
def runs(tmp_path_factory) -> tuple[Path, dict[str, Net]]:
    root = tmp_path_factory.mktemp("replay")
    _run(root, "golden", None)
    _run(root, "statistics", None, task="statistics")
    models = {fault: _run(root, fault, None if fault == "none" else fault) for fault in FAULTS}
    return root, models


def _folder(root: Path, name: str) -> Path:
    return root / name / "step0" / "rank"


@pytest.mark.parametrize(
    ("fault", "cause"),
    [("weights", "weights"), ("inputs", "inputs"), ("computation", "computation"), ("none", "none"),
     ("dropout", "unconfirmed"), ("unrecorded_weights", "weights")],
)  # fmt: skip
def test_the_cause_class_is_the_faults(runs, fault, cause):
    root, models = runs
    report = replay_module(models[fault], "block", _folder(root, fault), _folder(root, "golden"))
    assert report.cause == cause, report.table()
    assert report.entry == "Module.block.Block.forward.0"
    if cause != "unconfirmed":  # the replay reproduces its own run exactly: same process, same kernels
        assert report.reproduced == 0.0, report.table()


def test_a_weight_far_upstream_is_not_blamed_on_the_module_that_reads_its_effect(runs):
    """The control for the inputs rule: replayed at the upstream layer itself, the same fault is its weights."""
    root, models = runs
    report = replay_module(models["inputs"], "inp", _folder(root, "inputs"), _folder(root, "golden"))
    assert report.cause == "weights", report.table()


SCRIPT = """
import sys
sys.path.insert(0, {tests!r})
from test_replay import build

def model_and_inputs():
    return build({fault!r}), ()
"""


def _cli(root: Path, fault: str, module: str = "block", npu: str | None = None):
    script = root / f"script_{fault}.py"
    script.write_text(SCRIPT.format(tests=str(Path(__file__).parent), fault=fault))
    arguments = ["replay", "-s", str(script), "-m", module, "--npu_path", str(_folder(root, npu or fault)),
                 "--bench_path", str(_folder(root, "golden"))]  # fmt: skip
    return CliRunner().invoke(cli, arguments)


def test_the_command_prints_each_substitution_and_exits_1_on_a_cause(runs):
    root, _ = runs
    result = _cli(root, "computation")
    assert result.exit_code == 1, result.output
    assert "the golden run's inputs, the golden run's weights:" in result.output
    assert result.output.strip().splitlines()[-1].startswith("cause: computation: ")


@pytest.mark.parametrize(
    ("module", "npu", "said"),
    [("block", "statistics", "is a 'statistics' dump: replay needs the tensors"),
     ("no.such", "weights", "module 'no.such': the model has no module at that path"),
     ("block", "missing", "holds no dump.json")],
)  # fmt: skip
def test_bad_input_is_one_line_and_exit_2(runs, module, npu, said):
    root, _ = runs
    result = _cli(root, "weights", module=module, npu=npu)
    assert result.exit_code == 2 and said in result.output and "Traceback" not in result.output, result.output


def test_a_dump_without_a_tensor_file_says_which(runs, tmp_path):
    import shutil

    root, models = runs
    copy = tmp_path / "run"
    shutil.copytree(_folder(root, "weights"), copy)
    (copy / "dump_tensor_data" / "Module.block.Block.forward.0.input.0.pt").unlink()
    with pytest.raises(ReplayError, match=r"Module\.block\.Block\.forward\.0\.input\.0\.pt is not in the dump"):
        replay_module(models["weights"], "block", copy, _folder(root, "golden"))


def test_the_compare_replays_the_module_it_names_and_says_it_confirms_the_answer(runs, tmp_path):
    root, _ = runs
    script = root / "script_for_compare.py"
    script.write_text(SCRIPT.format(tests=str(Path(__file__).parent), fault="weights"))
    spec = tmp_path / "compare.json"
    spec.write_text(json.dumps({"npu_path": str(root / "weights"), "bench_path": str(root / "golden")}))
    arguments = ["compare", "-i", str(spec), "-o", str(tmp_path / "out"), "--first-divergence", "--replay", str(script)]
    result = CliRunner().invoke(cli, arguments)
    assert result.exit_code == 1, result.output
    answer = next(line for line in result.output.splitlines() if line.startswith("the runs part ways"))
    assert "the weights of block.fc1 differ" in answer, answer
    line = next(line for line in result.output.splitlines() if line.startswith("replay of "))
    assert line.startswith("replay of Module.block.fc1.Linear.forward.0 confirms it: "), line


def test_replay_without_first_divergence_is_a_usage_error(runs, tmp_path):
    root, _ = runs
    spec = tmp_path / "compare.json"
    spec.write_text(json.dumps({"npu_path": str(root / "weights"), "bench_path": str(root / "golden")}))
    script = root / "script_weights.py"
    script.write_text(SCRIPT.format(tests=str(Path(__file__).parent), fault="weights"))
    result = CliRunner().invoke(cli, ["compare", "-i", str(spec), "-o", str(tmp_path / "out"), "--replay", str(script)])
    assert result.exit_code == 2 and "give --first-divergence too" in result.output, result.output
