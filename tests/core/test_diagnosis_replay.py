"""The replay rule that judges a compiled run's values: thresholds worked out by hand from float32's epsilon."""

from __future__ import annotations

import pytest

from msprobe.core.diagnosis.replay import ReplayedValue, departs, diagnose_replayed

EPS32 = 2.0**-23  # 1.1920929e-07; 64 of them are 7.62939e-06


@pytest.mark.parametrize(
    ("eager", "compiled", "expected"),
    [
        (1e-7, 7.6e-6, False),  # under 64 ulps (7.63e-6), though 76 times the eager error
        (1e-7, 7.7e-6, True),  # over 64 ulps, and over 16 x 1e-7
        (1e-6, 1.5e-5, False),  # 16 x the eager error (1.6e-5) is the larger bound here
        (1e-6, 1.7e-5, True),
        (0.0, 0.0, False),
        (1e-7, float("inf"), True),  # a nan in the compiled value counts as infinitely far
    ],
)
def test_a_value_departs_beyond_both_bounds_only(eager, compiled, expected):
    assert departs(eager, compiled, EPS32) is expected


def _value(name: str, compiled: float, kernel: str = "") -> ReplayedValue:
    return ReplayedValue(name, "gelu", EPS32, 1e-7, compiled, module="blocks.0.mlp", kernel=kernel)


def test_the_first_departing_value_in_order_is_the_answer():
    values = [_value("a", 1e-7), _value("h", 1.5e-4, "cpp_fused_gelu_0"), _value("z", 1.0)]
    found = diagnose_replayed(values)
    assert (found.verdict, found.api, found.module, found.cause, found.compared) == (
        "divergence", "h", "blocks.0.mlp", "computation", 3)  # fmt: skip
    assert found.line() == (
        "the runs part ways at h (forward, module blocks.0.mlp): the same inputs and weights give different outputs "
        "(the computation differs) (gelu: 0.00015 from its float64 replay against 1e-07 eagerly; computed in kernel "
        "cpp_fused_gelu_0)"
    )


def test_no_departing_value_is_no_divergence_and_says_how_many_were_checked():
    found = diagnose_replayed([_value("a", 2e-7), _value("b", 7e-6)], "inductor graph")
    assert found.verdict == "none" and found.compared == 2
    assert found.line() == (
        "the runs do not part ways: no value of the inductor graph departs from eager beyond rounding "
        "(2 checked, each against its float64 replay)"
    )
