"""Precision bisection on live models: each outcome on a network whose precision-sensitive modules are known from
their arithmetic (bench/precision_faults.py says why each one fails in its dtype), the command's exit codes and
file, and bad input."""

from __future__ import annotations

import json
import sys

import pytest
import torch
from click.testing import CliRunner
from repo_paths import REPO_ROOT

sys.path.insert(0, str(REPO_ROOT / "bench"))
import bench_bisect
from precision_faults import CASES, HELD_OUT, inputs

from msprobe.cli.main import cli
from msprobe.core.bisect import FOUND, NOT_ENOUGH, NOTHING_NEEDED
from msprobe.core.errors import UsageError
from msprobe.pytorch.bisect import bisect_precision, leaf_modules

BY_NAME = {case.name: case for case in [*CASES, *HELD_OUT]}


@pytest.mark.parametrize(
    "name",
    [
        "softmax.fp16.cast",  # one module: exp overflows fp16
        "residual.bf16.cast",  # two modules, each storing the lifted stream
        "softmax.fp16.autocast",  # under autocast: the softmax, not the stem whose float32 output would spare it
        "control.bf16.cast",  # nothing needed
        "held.underflow.bf16.cast",  # what underflows fp16 is no fault in bf16
    ],
)
def test_the_bench_cases_find_the_modules_their_arithmetic_needs(name):
    case = BY_NAME[name]
    result = bench_bisect.run_case(case)
    assert set(result.minimal) == set(case.expected), result.table()
    assert result.outcome == (FOUND if case.expected else NOTHING_NEEDED)
    if case.expected:
        assert result.final <= result.tolerance < result.baseline
        # the modules needed are the most sensitive alone, in cast mode where each computes in its own dtype
        if case.mode == "cast":
            ranked = sorted(result.sensitivity, key=lambda m: -min(result.sensitivity[m], 1e30))
            assert set(ranked[: len(case.expected)]) == set(case.expected), result.table()


def test_a_fault_outside_the_candidates_is_said_to_be_outside_them():
    case = BY_NAME["softmax.fp16.cast"]
    result = bisect_precision(case.build(), inputs(), dtype="fp16", modules=["mlp.fc1", "head"], rank=False)
    assert result.outcome == NOT_ENOUGH and result.minimal == []
    assert result.line().startswith("not found among the candidates")


def test_the_model_is_left_as_it_was():
    case = BY_NAME["residual.bf16.cast"]
    model = case.build()
    before = {name: tensor.clone() for name, tensor in model.state_dict().items()}
    hooks = len(model.stem._forward_pre_hooks)
    bisect_precision(model, inputs(), dtype="bf16", rank=False)
    after = model.state_dict()
    assert all(after[name].dtype == torch.float32 and torch.equal(after[name], before[name]) for name in before)
    assert len(model.stem._forward_pre_hooks) == hooks and all(p.grad is None for p in model.parameters())


def test_a_user_loss_is_what_the_step_differentiates():
    case = BY_NAME["control.fp16.cast"]
    seen = []

    def loss(output):
        seen.append(output.dtype)
        return output.sum()

    bisect_precision(case.build(), inputs(), loss, dtype="fp16", rank=False)
    assert seen and set(seen) == {torch.float32}  # the loss is taken of the output in float32


@pytest.mark.parametrize(
    ("arguments", "message"),
    [
        ({"modules": ["no.such"]}, "module 'no.such' is not in the model"),
        ({"dtype": "fp8"}, "dtype 'fp8' is not one of bf16, fp16"),
        ({"mode": "quantized"}, "mode 'quantized' is not one of cast, autocast"),
        ({"tolerance": float("nan")}, "the tolerance must be a positive number"),
    ],
)
def test_bad_arguments_are_one_clear_error(arguments, message):
    with pytest.raises(UsageError, match=message):
        bisect_precision(BY_NAME["control.bf16.cast"].build(), inputs(), **arguments)


SCRIPT = """
import sys
sys.path.insert(0, {bench!r})
from precision_faults import CASES, inputs

CASE = next(case for case in CASES if case.name == {name!r})

def model_and_inputs():
    return CASE.build(), (inputs(CASE.padded),)
"""


def test_the_command_prints_the_table_writes_the_file_and_exits_1_when_modules_are_needed(tmp_path):
    script = tmp_path / "model.py"
    script.write_text(SCRIPT.format(bench=str(REPO_ROOT / "bench"), name="softmax.fp16.cast"))
    out = tmp_path / "out"
    result = CliRunner().invoke(cli, ["-f", "pytorch", "precision_bisect", "-s", str(script), "--dtype", "fp16",
                                      "-o", str(out)])  # fmt: skip
    assert result.exit_code == 1, result.output
    assert "1 module needs float32: softmax (error inf in fp16" in result.output
    table = result.output.splitlines()
    assert table[0].split() == ["module", "error", "alone", "in", "fp16", "needed"]
    assert table[1].split() == ["softmax", "inf", "yes"]
    written = json.loads((out / "precision_bisect.json").read_text())
    assert written["minimal"] == ["softmax"] and written["outcome"] == FOUND
    assert written["runs"][0] == {"upcast": [], "error": "inf"}


def test_the_command_exits_0_when_nothing_is_needed_and_refuses_a_loss_that_is_not_a_function(tmp_path):
    script = tmp_path / "model.py"
    script.write_text(SCRIPT.format(bench=str(REPO_ROOT / "bench"), name="control.bf16.cast"))
    result = CliRunner().invoke(cli, ["-f", "pytorch", "precision_bisect", "-s", str(script), "--no-ranking"])
    assert result.exit_code == 0, result.output
    assert result.output.startswith("nothing needs float32: the bf16 step is within 0.05")
    missing = CliRunner().invoke(cli, ["-f", "pytorch", "precision_bisect", "-s", str(script), "-m", "nowhere"])
    assert missing.exit_code == 2 and "module 'nowhere' is not in the model" in missing.output
    script.write_text(script.read_text() + "\nloss = 3\n")
    refused = CliRunner().invoke(cli, ["-f", "pytorch", "precision_bisect", "-s", str(script)])
    assert refused.exit_code == 2 and "loss is defined but is not a function" in refused.output
    assert "Traceback" not in refused.output + missing.output


def test_the_default_candidates_are_the_leaf_modules_in_registration_order():
    model = BY_NAME["softmax_then_norm.fp16.cast"].build()
    assert leaf_modules(model) == ["stem", "softmax", "norm", "mlp.fc1", "mlp.act", "mlp.fc2", "head"]


def test_the_documented_example_gives_the_documented_answer(tmp_path):
    script = REPO_ROOT / "examples" / "precision_bisect.py"
    result = CliRunner().invoke(cli, ["-f", "pytorch", "precision_bisect", "-s", str(script), "--dtype", "fp16"])
    assert result.exit_code == 1, result.output
    answer = "1 module needs float32: attend (error inf in fp16"
    assert answer in result.output and answer in (REPO_ROOT / "docs" / "bisect.md").read_text()
