"""The precision bisection's search, on oracles whose needed modules are known: a step is within the tolerance
exactly when every module of a hidden set (or, for alternatives, of any one of several sets) is upcast."""

from __future__ import annotations

import itertools
import math

import pytest

from msprobe.core.bisect import FOUND, NOT_ENOUGH, NOTHING_NEEDED, bisect, estimated_runs

NAMES = [f"m{index}" for index in range(32)]


def _oracle(*needed_sets: set[str], calls: list | None = None):
    """Error 0 when some set of ``needed_sets`` is wholly upcast, else 1 (a monotone step)."""

    def error(upcast: tuple[str, ...]) -> float:
        if calls is not None:
            calls.append(upcast)
        return 0.0 if any(needed <= set(upcast) for needed in needed_sets) else 1.0

    return error


@pytest.mark.parametrize("count", [1, 2, 3])
def test_every_hidden_set_is_found_exactly_in_about_log2_runs_per_module(count):
    for needed in itertools.islice(itertools.combinations(NAMES, count), 0, None, 97):
        calls: list = []
        result = bisect(NAMES, _oracle(set(needed), calls=calls), 0.5, "bf16", rank=False)
        assert result.outcome == FOUND and result.minimal == list(needed)
        # the step as it is and all upcast, then per needed module a check and a binary search over 32, then
        # one check of the set and each module tried without
        assert len(calls) <= 2 + count * (1 + math.ceil(math.log2(len(NAMES)))) + 1 + count


def test_of_two_sufficient_modules_the_later_one_is_named():
    """Either module alone suffices (an earlier module's float32 output can spare a later one): the later."""
    result = bisect(NAMES, _oracle({"m3"}, {"m20"}), 0.5, "bf16", rank=False)
    assert result.minimal == ["m20"]


def test_a_step_within_the_tolerance_needs_nothing_and_one_beyond_it_even_upcast_is_not_enough():
    within = bisect(NAMES, lambda upcast: 0.01, 0.05, "bf16", rank=False)
    assert within.outcome == NOTHING_NEEDED and within.minimal == [] and len(within.runs) == 2
    assert within.line().startswith("nothing needs float32: the bf16 step is within 0.05")
    outside = bisect(NAMES, lambda upcast: math.inf, 0.05, "fp16", rank=False)
    assert outside.outcome == NOT_ENOUGH and outside.minimal == []
    assert "not found among the candidates" in outside.line() and "inf" in outside.line()


def test_the_sensitivity_table_ranks_each_module_by_its_error_alone_in_low_precision():
    # each module alone in low precision costs its index; m5 is non-finite
    def error(upcast: tuple[str, ...]) -> float:
        low = [name for name in NAMES[:8] if name not in upcast]
        if not low:
            return 0.0
        if "m5" in low:
            return math.inf
        return float(max(int(name[1:]) for name in low)) / 10

    result = bisect(NAMES[:8], error, 0.35, "fp16")
    assert result.minimal == ["m4", "m5", "m6", "m7"]
    assert result.sensitivity["m5"] == math.inf and result.sensitivity["m2"] == pytest.approx(0.2)
    lines = result.table().splitlines()
    assert lines[1].startswith("m5") and lines[1].rstrip().endswith("inf  yes")  # largest first
    assert lines[2].startswith("m7") and lines[-2].startswith("m0")
    assert result.to_json()["sensitivity"]["m5"] == "inf"


def test_a_step_that_is_not_monotone_still_ends_with_a_set_that_passes_or_says_so():
    # passes only with exactly {m1} upcast: adding more hurts
    result = bisect(NAMES[:6], lambda upcast: 0.0 if set(upcast) in ({"m1"}, set(NAMES[:6])) else 1.0, 0.5, "bf16")
    assert result.outcome == FOUND
    passed = set(result.minimal) in ({"m1"}, set(NAMES[:6]))
    assert result.final == (0.0 if passed else 1.0)
    assert result.line().startswith("no set found: upcasting more") != passed


def test_the_first_progress_total_counts_the_search_and_the_table():
    assert estimated_runs(32, rank=False) == 4 + 5
    assert estimated_runs(32) == 4 + 5 + 32
