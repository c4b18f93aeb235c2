"""Transient or persistent on a live training loop: faults injected at a known call (bench/transient_faults.py),
the state a re-run starts from, and the guard's cost-free path when nothing fires."""

from __future__ import annotations

import sys

import pytest
import torch

from paths import REPO_ROOT

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
