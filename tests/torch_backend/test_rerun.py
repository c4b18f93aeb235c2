"""Transient or persistent on a live training loop: faults injected at a known call (bench/transient_faults.py),
the state a re-run starts from, and the guard's cost-free path when nothing fires."""

from __future__ import annotations

import sys

import pytest
import torch
from repo_paths import REPO_ROOT

sys.path.insert(0, str(REPO_ROOT / "bench"))
import bench_rerun
from transient_faults import CASES, Case, batches, model_and_optimizer, step_function

from msprobe.pytorch.rerun import StepGuard

BY_NAME = {case.name: case for case in CASES}


@pytest.mark.parametrize(
    "name",
    ["flip.fc", "flip.backward.mm0", "flip.loss", "batch.nan", "bug.exp", "bug.backward", "bug.scale",
     "control.seed0"],
)  # fmt: skip
def test_each_kind_of_fault_gets_its_verdict_at_its_call(name):
    case = BY_NAME[name]
    verdicts = bench_rerun.run_case(case)
    assert bench_rerun.right(case, verdicts), [v.line() for v in verdicts]


def _trained(case: Case, flip: bool) -> dict[str, torch.Tensor]:
    model, optimizer = model_and_optimizer(case)
    guard = StepGuard(model, optimizer)
    step = step_function(model, optimizer)
    for index, batch in enumerate(batches(case)):
        if flip and index == 4:
            from transient_faults import FlipOnce

            with FlipOnce(*case.flip):
                guard.run(step, batch)
        else:
            guard.run(step, batch)
    return {name: tensor.clone() for name, tensor in model.state_dict().items()}


def test_after_a_transient_fault_training_goes_on_as_if_it_had_not_happened():
    """The re-run starts from the saved weights, optimizer state, random state and batch: the weights at the
    end are those of the run without the fault, bit for bit."""
    case = BY_NAME["flip.fc"]
    faulted, clean = _trained(case, flip=True), _trained(case, flip=False)
    assert all(torch.equal(faulted[name], clean[name]) for name in clean)


def test_a_step_run_again_draws_the_same_random_numbers():
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(4, 4), torch.nn.Dropout(0.5), torch.nn.Linear(4, 1))
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    losses = iter([None, float("nan")])

    def step(x: torch.Tensor) -> torch.Tensor:
        optimizer.zero_grad()
        loss = model(x).square().mean()
        loss.backward()
        optimizer.step()
        forced = next(losses, None)  # the first execution says its loss is nan: the rule fires
        return loss if forced is None else loss * forced

    guard = StepGuard(model, optimizer)
    guard.run(step, torch.ones(8, 4))
    guard.run(step, torch.ones(8, 4))
    [verdict] = guard.verdicts
    # the dropout mask is drawn again from the saved state, so every call but the forced product agrees
    assert verdict.kind == "transient" and verdict.call is not None and verdict.call.name == "aten.mul.Tensor"
    assert verdict.call.index == verdict.calls - 1  # not the dropout's draw


# -- beside a dump: the debugger's own findings send a step to be run again ------------------------------------


class _Clamped(torch.nn.Module):
    """A gate whose exponential overflows on a marked batch and is clamped back (no gradient flows through it):
    the loss and the gradients stay finite, so only a check that sees each call's output finds the inf."""

    def __init__(self):
        super().__init__()
        self.fc, self.head = torch.nn.Linear(4, 4), torch.nn.Linear(4, 1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        hidden = self.fc(x)
        gate = torch.exp(hidden.detach().abs()).clamp(max=10.0)
        return self.head(hidden * gate)


def _guarded_steps(tmp_path, task: str, rerun: dict, marked_step: int | None = 2, flip: bool = False):
    """Four steps of _Clamped under a guard given a debugger of ``task``; the batch of ``marked_step`` holds a
    value that makes the exponential overflow (a persistent fault), or with ``flip`` one bit of the linear's
    output is flipped once in that step (a transient one)."""
    import json

    from transient_faults import FlipOnce

    from msprobe.pytorch import PrecisionDebugger

    model, optimizer = _clamped_model_and_optimizer()
    step = _clamped_step(model, optimizer)
    config = tmp_path / "config.json"
    config.write_text(json.dumps({"task": task, "level": "L1", "dump_path": str(tmp_path / "dump"), "rerun": rerun}))
    debugger = PrecisionDebugger(config_path=str(config), model=model)
    guard = StepGuard(model, optimizer, debugger=debugger)

    for index in range(4):
        x = torch.full((8, 4), 0.1)
        if index == marked_step and not flip:
            x[0, 0] = 1e4  # exp(fc(x)) overflows in one row, clamped to 10
        if index == marked_step and flip:
            with FlipOnce("aten.addmm.default", 0):
                guard.run(step, x)
        else:
            guard.run(step, x)
    debugger.finish()
    return guard


@pytest.mark.parametrize("task", ["overflow_check", "flight_recorder"])
def test_what_the_debugger_flags_sends_the_step_to_be_run_again(tmp_path, task):
    """The loss never spikes (the rule alone stays quiet); the overflow check or the flight recorder sees the
    exponential's inf, and the step is run again: the same calls bit for bit, so persistent, at the exp."""
    guard = _guarded_steps(tmp_path, task, {"loss_threshold": None})
    [verdict] = guard.verdicts
    assert (verdict.step, verdict.kind) == (2, "persistent"), verdict.line()
    assert verdict.call is not None and verdict.call.name == "aten.exp.default", verdict.line()
    assert "inf or nan" in verdict.reason or "trigger fired" in verdict.reason, verdict.line()
    assert list((tmp_path / "dump").rglob("dump.json"))  # the first execution was dumped


def _clamped_model_and_optimizer():
    torch.manual_seed(0)
    model = _Clamped()
    return model, torch.optim.SGD(model.parameters(), lr=0.01)


def _clamped_step(model: torch.nn.Module, optimizer: torch.optim.Optimizer):
    def step(x: torch.Tensor) -> torch.Tensor:
        optimizer.zero_grad()
        loss = model(x).square().mean()
        loss.backward()
        optimizer.step()
        return loss

    return step


def test_a_bit_flipped_once_beside_a_dump_is_transient_at_its_call(tmp_path):
    """The flip makes one output of the linear huge, the exponential's inf follows and the overflow check keeps
    it; run again, the step gives other results from that call on: transient, at the linear's addmm. The dump's
    own operators (its statistics, its detaching) are left out of both records, or they would part at once."""
    guard = _guarded_steps(tmp_path, "overflow_check", {"loss_threshold": None}, flip=True)
    [verdict] = guard.verdicts
    assert (verdict.step, verdict.kind) == (2, "transient"), verdict.line()
    assert verdict.call is not None and verdict.call.name == "aten.addmm.default", verdict.line()


def test_with_the_switch_off_nothing_is_kept_and_no_step_runs_twice(tmp_path, monkeypatch):
    def refuse(*args):
        raise AssertionError("the step's state was saved with the switch off")

    monkeypatch.setattr(StepGuard, "_save", refuse)
    guard = _guarded_steps(tmp_path, "overflow_check", {"enabled": False})
    assert guard.verdicts == [] and not guard.enabled
    assert list((tmp_path / "dump").rglob("dump.json"))  # the debugger still dumps


def test_the_rule_without_the_debugger_does_not_fire_on_the_clamped_inf(tmp_path):
    """The negative control of the two tests above: the same steps under a guard alone stay quiet."""
    from msprobe.core.rerun import LossRule

    model, optimizer = _clamped_model_and_optimizer()
    guard = StepGuard(model, optimizer, rule=LossRule(threshold=None))
    step = _clamped_step(model, optimizer)
    for index in range(4):
        x = torch.full((8, 4), 0.1)
        if index == 2:
            x[0, 0] = 1e4
        guard.run(step, x)
    assert guard.verdicts == []


@pytest.mark.parametrize("returned", [None, "loss", (1.0, 2.0)])
def test_a_step_that_returns_no_loss_is_one_clear_error(returned):
    model, optimizer = _clamped_model_and_optimizer()
    guard = StepGuard(model, optimizer)
    with pytest.raises(TypeError, match="the step function must return its loss"):
        guard.run(lambda batch: returned, torch.zeros(2, 4))


def test_another_msprobe_tool_hooked_into_the_step_is_left_out_of_both_records(tmp_path):
    """A grad probe of another debugger measures every optimizer step (a global optimizer hook). Its arithmetic
    is msprobe's, not the step's: left out of both executions alike, the persistent fault stays persistent."""
    from msprobe.pytorch import PrecisionDebugger

    other = torch.nn.Linear(4, 1)
    other(torch.ones(2, 4)).sum().backward()  # gradients the probe measures at every optimizer's step
    probe = PrecisionDebugger(task="grad_probe", dump_path=str(tmp_path / "probe"))
    probe.grad_probe(other)
    (tmp_path / "guarded").mkdir()
    try:
        guard = _guarded_steps(tmp_path / "guarded", "overflow_check", {"loss_threshold": None})
    finally:
        probe.finish()
    [verdict] = guard.verdicts
    assert (verdict.step, verdict.kind) == (2, "persistent"), verdict.line()
    assert verdict.call is not None and verdict.call.name == "aten.exp.default", verdict.line()
