"""Replay's verdict from the distances of its runs, and the distance itself, with values worked by hand."""

import math

import numpy as np
import pytest

from msprobe.core.replay import Trial, decide, relative_error

THIS, GOLDEN = "this run's", "the golden run's"


def _trials(inputs: float, weights: float, both: float) -> list[Trial]:
    return [Trial(GOLDEN, THIS, inputs), Trial(THIS, GOLDEN, weights), Trial(GOLDEN, GOLDEN, both)]


@pytest.mark.parametrize(
    ("baseline", "reproduced", "errors", "cause"),
    [
        (0.05, 0.0, (0.0, 0.05, 0.0), "inputs"),
        (0.05, 0.0, (0.05, 1e-8, 0.0), "weights"),
        (0.05, 0.0, (0.03, 0.04, 0.0), "inputs and weights"),
        (0.05, 0.0, (0.05, 0.05, 0.05), "computation"),
        (0.0, 0.0, (0.0, 0.0, 0.0), "none"),
        (0.05, 0.3, (0.0, 0.0, 0.0), "unconfirmed"),  # the replay does not reproduce its own run
        (math.inf, 0.0, (math.inf, math.inf, math.inf), "computation"),  # another shape everywhere
        (math.inf, 0.0, (0.0, math.inf, 0.0), "inputs"),
        (0.05, 0.0, (0.006, 0.05, 0.0), "inputs and weights"),  # 0.006 is not ten times closer than 0.05
    ],
)
def test_the_first_substitution_that_brings_the_output_back_names_the_cause(baseline, reproduced, errors, cause):
    assert decide(baseline, reproduced, _trials(*errors))[0] == cause


def test_a_module_that_draws_random_numbers_is_never_confirmed():
    cause, words = decide(0.05, 0.0, _trials(0.0, 0.05, 0.0), random=True)
    assert cause == "unconfirmed" and "random numbers" in words


def test_no_substitution_with_weights_the_dumps_lack_is_not_called_the_computation():
    cause, words = decide(0.05, 0.0, _trials(0.05, 0.05, 0.05), unrecorded=["mixer.conv1d.bias (both)"])
    assert cause == "unconfirmed" and "mixer.conv1d.bias (both)" in words
    assert decide(0.05, 0.0, _trials(0.0, 0.05, 0.0), unrecorded=["x (both)"])[0] == "inputs"


def test_the_distance_is_the_norm_of_the_difference_over_the_golden_norm():
    ours, theirs = [np.array([3.0, 4.0])], [np.array([0.0, 5.0])]
    assert relative_error(ours, theirs) == pytest.approx(math.sqrt(9 + 1) / 5)  # |(3, -1)| / |(0, 5)|
    assert relative_error(theirs, theirs) == 0.0
    assert relative_error([np.zeros(2)], [np.zeros(3)]) == math.inf
    assert relative_error([np.array([np.nan, 1.0])], [np.array([0.0, 1.0])]) == math.inf
    assert relative_error([np.array([np.inf, 1.0])], [np.array([np.inf, 1.0])]) == 0.0


def _report(cause: str):
    from msprobe.core.replay import ReplayReport

    return ReplayReport("fc", "Module.fc.Linear.forward.0", 0.05, 0.0, cause=cause, words="because")


@pytest.mark.parametrize(
    ("diagnosed", "replayed", "said"),
    [("weights", "weights", "confirms it"), ("argument", "computation", "confirms it"),
     ("data", "inputs", "confirms it"), ("weights", "computation", "disagrees: it finds the computation"),
     ("backward", "none", "does not test the cause 'backward'"), ("weights", "unconfirmed", ": unconfirmed: ")],
)  # fmt: skip
def test_the_replay_line_says_whether_it_confirms_the_diagnosis(diagnosed, replayed, said):
    from msprobe.core.replay import confirmation

    assert said in confirmation(diagnosed, _report(replayed))


def test_the_module_call_is_the_one_that_made_the_answers_call():
    from msprobe.core.replay import module_call

    construct = {"Functional.linear.3.forward": "Module.fc.Linear.forward.2", "Module.fc.Linear.forward.2": None,
                 "Functional.relu.0.forward": "Module.act.ReLU.forward.0"}  # fmt: skip
    assert module_call(construct, "fc", "Functional.linear.3.forward") == 2
    assert module_call(construct, "fc", "Module.fc.Linear.forward.1") == 1
    assert module_call(construct, "fc", "Functional.relu.0.forward") == 0  # not a call of it: the first
