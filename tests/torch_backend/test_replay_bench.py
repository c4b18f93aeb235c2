"""The quick subset of bench/bench_replay.py: replay's cause class on faults of the diagnosis benchmark (a
weight, an argument, another output shape, data) and a control, held to its targets."""

import sys
from pathlib import Path

BENCH = Path(__file__).resolve().parents[2] / "bench"


def test_the_quick_subset_meets_the_targets(monkeypatch, capsys):
    monkeypatch.syspath_prepend(str(BENCH))
    monkeypatch.setattr(sys, "argv", ["bench_replay.py", "--quick"])
    import bench_replay

    status = bench_replay.main()
    printed = capsys.readouterr().out
    assert status == 0, printed
    assert "cause class right on 4/4" in printed and "controls 'none': 1/1" in printed, printed
