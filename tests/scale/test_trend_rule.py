"""`msprobe db trend`'s SQL answer to "where is the first inf or nan made" against the diagnosis's Python rule
(msprobe.core.diagnosis.first_nonfinite, which the flight recorder answers by), on every non-finite fault of
the diagnosis benchmark and on controls with none: the two must name the same step and call."""

from __future__ import annotations

import sys

import pytest
from repo_paths import REPO_ROOT

from msprobe.core.diagnosis import first_nonfinite
from msprobe.core.dump.layout import dump_folders
from msprobe.core.dump.reader import read_dump
from msprobe.core.store.build import build_store
from msprobe.core.store.trend import write_trend

sys.path.insert(0, str(REPO_ROOT / "bench"))
import bench_diagnosis as bench
from diagnosis_faults import FAULTS, FROZEN_HELD_OUT

NONFINITE = [fault for fault in FAULTS + FROZEN_HELD_OUT if fault.kind == "nan" and fault.world == 1]
CONTROLS = [fault for fault in FAULTS if fault.expect is None and fault.world == 1][:2]


def _python_rule(root) -> tuple[int, str] | None:
    """The first step whose dump makes an inf or nan, and the call that makes it, by the diagnosis's rule."""
    for labels, folder in sorted(dump_folders(root, "dump_path").items()):
        call = first_nonfinite(read_dump(folder))
        if call is not None:
            return int(labels[0].removeprefix("step")), call.name
    return None


def test_the_cases_are_there():
    assert len(NONFINITE) >= 8 and len(CONTROLS) == 2


@pytest.mark.parametrize("fault", NONFINITE + CONTROLS, ids=lambda fault: fault.name)
def test_the_sql_rule_names_what_the_python_rule_names(tmp_path, fault):
    root = bench.train(fault, fault.arch, "statistics", False, tmp_path / "dump")
    build_store(root, tmp_path / "store")
    found = write_trend(tmp_path / "store", tmp_path / "trend.html", ".*").nonfinite
    expected = _python_rule(root)
    if fault.expect is None:
        assert expected is None and found is None
        return
    assert expected is not None, f"{fault.name} made no inf or nan"
    assert (found.step, found.name) == expected, found
