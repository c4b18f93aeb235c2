"""Pipeline stages of several microbatches merged into the global run's order and names, written out by hand:
two stages, two microbatches, stage 0 making two linears a microbatch and stage 1 one linear and a loss."""

from __future__ import annotations

from pathlib import Path

import pytest

from msprobe.core.dump.reader import Dump
from msprobe.core.errors import DataFileError
from msprobe.core.parallel.merge import merge_ranks


def _dump(rank: int, names: list[str]) -> Dump:
    return Dump(Path(f"run/step0/rank{rank}"), "statistics", "mix", "pytorch", {name: {} for name in names}, None)


def _stage0(microbatches: int = 2) -> Dump:
    names = []
    for mb in range(microbatches):  # both forwards first (1F1B on the first stage)
        names += [f"Functional.linear.{2 * mb}.forward", f"Functional.linear.{2 * mb + 1}.forward",
                  f"Module.a.Linear.forward.{mb}", f"Distributed.isend.{mb}.forward"]  # fmt: skip
    names.append("Module.a.Linear.parameters_grad")
    for mb in range(microbatches):
        names += [f"Distributed.recv.{mb}.forward", f"Functional.linear.{2 * mb + 1}.backward",
                  f"Functional.linear.{2 * mb}.backward", f"Module.a.Linear.backward.{mb}"]  # fmt: skip
    return _dump(0, names)


def _stage1(microbatches: int = 2) -> Dump:
    names = []
    for mb in range(microbatches):
        names += [f"Distributed.recv.{mb}.forward", f"Functional.linear.{mb}.forward", f"Module.b.Linear.forward.{mb}",
                  f"Functional.cross_entropy.{mb}.forward", f"Functional.cross_entropy.{mb}.backward",
                  f"Functional.linear.{mb}.backward", f"Module.b.Linear.backward.{mb}",
                  f"Distributed.isend.{mb}.forward"]  # fmt: skip
    return _dump(1, names)


def test_microbatch_by_microbatch_with_the_counts_the_global_run_gives():
    merged = merge_ranks({0: _stage0(), 1: _stage1()})
    expected = []
    for mb in range(2):
        first = 3 * mb  # three linears a microbatch: stage 0's two, then stage 1's one
        expected += [f"Functional.linear.{first}.forward", f"Functional.linear.{first + 1}.forward",
                     f"Module.a.Linear.forward.{mb}",
                     f"Functional.linear.{first + 2}.forward", f"Module.b.Linear.forward.{mb}",
                     f"Functional.cross_entropy.{mb}.forward",
                     # the backward: stage 1's, then stage 0's
                     f"Functional.cross_entropy.{mb}.backward", f"Functional.linear.{first + 2}.backward",
                     f"Module.b.Linear.backward.{mb}",
                     f"Functional.linear.{first + 1}.backward", f"Functional.linear.{first}.backward",
                     f"Module.a.Linear.backward.{mb}"]  # fmt: skip
        if mb == 1:  # the gradients the microbatches accumulate: whole after the last
            expected.insert(len(expected) - 3, "Module.a.Linear.parameters_grad")
    assert list(merged.dump.data) == expected
    assert merged.stage_of["Functional.linear.5.forward"] == 1 and merged.stage_of["Functional.linear.4.forward"] == 0


def test_one_microbatch_numbers_on_from_the_stages_before():
    merged = merge_ranks({0: _stage0(1), 1: _stage1(1)})
    assert "Functional.linear.2.forward" in merged.dump.data and merged.stage_of["Functional.linear.2.forward"] == 1


def test_stages_of_other_numbers_of_microbatches_are_refused():
    with pytest.raises(DataFileError, match=r"other numbers of microbatches \(rank 0: 2, rank 1: 1\)"):
        merge_ranks({0: _stage0(2), 1: _stage1(1)})


def test_calls_that_do_not_split_over_the_microbatches_are_refused():
    stage0 = _stage0()
    stage0.data["Functional.gelu.0.forward"] = {}  # one gelu in two microbatches
    with pytest.raises(DataFileError, match="1 calls of Functional.gelu do not split over its 2 microbatches"):
        merge_ranks({0: stage0, 1: _stage1()})


def test_the_diagnosis_reads_accumulated_gradients_after_the_modules_last_backward():
    """Two microbatches through one module: its gradients are whole after its second backward, not its first."""
    from msprobe.core.diagnosis.calls import calls_of

    names = ["Functional.linear.0.forward", "Module.a.Linear.forward.0", "Module.a.Linear.parameters_grad",
             "Functional.linear.0.backward", "Module.a.Linear.backward.0",
             "Functional.linear.1.forward", "Module.a.Linear.forward.1",
             "Functional.linear.1.backward", "Module.a.Linear.backward.1"]  # fmt: skip
    order = [call.name for call in calls_of(_dump(0, names))]
    assert order.index("Module.a.Linear.parameters_grad") == order.index("Module.a.Linear.backward.1") + 1
