"""Transient or persistent, on hand-made call lists: which verdict, which call, and the rule that fires."""

from __future__ import annotations

import math

from msprobe.core.rerun import PERSISTENT, TRANSIENT, Call, LossRule, first_difference, judge


def _calls(*checksums: int, nonfinite_at: int | None = None) -> list[Call]:
    return [
        Call(index, f"aten.op{index % 2}.default", "fc" if index < 3 else "backward", checksum, index == nonfinite_at,
             index // 2)
        for index, checksum in enumerate(checksums)
    ]  # fmt: skip


def test_the_same_calls_bit_for_bit_are_persistent_and_name_the_first_non_finite_one():
    first, second = _calls(1, 2, 3, 4, nonfinite_at=2), _calls(1, 2, 3, 4, nonfinite_at=2)
    verdict = judge(7, "the loss is nan", first, second, math.nan, math.nan)
    assert verdict.kind == PERSISTENT and verdict.call == first[2]
    assert verdict.line() == (
        "step 7: persistent (the loss is nan; the step run again from its saved state gives the same 4 calls bit "
        "for bit, so the code or the data, not the hardware): call 2 aten.op0.default #1 (module fc), the first to "
        "make an inf or nan"
    )


def test_a_spike_with_nothing_non_finite_names_no_call():
    verdict = judge(3, "the loss 50 is more than 1 from its mean 2", _calls(1, 2), _calls(1, 2), 50.0, 50.0)
    assert verdict.kind == PERSISTENT and verdict.call is None
    assert "no call made an inf or nan" in verdict.line()


def test_another_result_is_transient_and_names_the_first_call_that_differs():
    first, second = _calls(1, 2, 9, 4), _calls(1, 2, 3, 5)
    verdict = judge(4, "the loss is nan", first, second, math.nan, 1.25)
    assert verdict.kind == TRANSIENT and verdict.call == first[2]
    assert verdict.line().endswith("the executions part at call 2 aten.op0.default #1 (module fc)")
    assert verdict.to_json()["call"] == {"index": 2, "name": "aten.op0.default", "occurrence": 1, "module": "fc",
                                         "nonfinite": False}  # fmt: skip


def test_the_same_calls_but_another_loss_are_transient_too():
    # the loss itself changed outside any recorded call (say, read back from the device wrongly)
    assert judge(1, "spike", _calls(1, 2), _calls(1, 2), 9.0, 1.0).kind == TRANSIENT


def test_executions_of_different_lengths_part_where_the_shorter_ends():
    longer, shorter = _calls(1, 2, 3), _calls(1, 2)
    assert first_difference(longer, shorter) == longer[2]
    assert first_difference(shorter, longer) == longer[2]
    assert first_difference(shorter, _calls(1, 2)) is None


def test_the_rule_fires_on_non_finite_values_and_on_spikes_and_keeps_them_out_of_its_series():
    rule = LossRule(threshold=1.0)
    assert rule.fires(2.0, 1.0) is None and rule.fires(2.2, 1.1) is None  # the series: mean 2.1, 1.05
    assert rule.fires(math.inf) == "the loss is inf"
    assert rule.fires(2.0, math.nan) == "the gradients' norm is nan"
    assert rule.fires(5.0, 1.0) == "the loss 5 is more than 1 from its mean 2.1"
    assert rule.fires(2.0, 3.0) == "the gradients' norm 3 is more than 1 from its mean 1.05"
    assert (rule.mean, rule.count) == (2.1, 2)  # none of the firing steps joined the series
    assert LossRule(threshold=None).fires(1e9) is None  # non-finite values only
