"""The grad probe's writer: summaries at once, direction files on threads, every file there once it settles."""

import logging

import numpy as np

from msprobe.core import grad_probe
from msprobe.core.grad_probe import GradRecord, GradSummaryWriter, wait_for_writers


def _records(count):
    rng = np.random.default_rng(0)
    return [
        GradRecord(f"layer{i}.weight", [64], 1.0, -1.0, 2.0, signs=np.packbits(rng.standard_normal(64) > 0))
        for i in range(count)
    ]


def test_direction_files_are_all_there_once_settled(tmp_path):
    writer = GradSummaryWriter(tmp_path, "L1", [])
    records = _records(30)
    writer.write_step(0, 0, records)
    wait_for_writers()  # what a comparison in the same process does first
    for record in records:
        assert np.array_equal(np.load(tmp_path / "rank0" / "step0" / f"{record.name}.npy"), record.signs)
    writer.write_step(1, 0, records)  # the next step starts by waiting for the last one's files
    writer.close()
    assert len(list((tmp_path / "rank0" / "step1").glob("*.npy"))) == 30


def test_a_failing_file_is_reported_and_the_others_are_written(tmp_path, monkeypatch, caplog):
    real = grad_probe.write_npy

    def flaky(path, array):
        if path.name == "layer3.weight.npy":
            raise OSError(28, "No space left on device")
        real(path, array)

    monkeypatch.setattr(grad_probe, "write_npy", flaky)
    writer = GradSummaryWriter(tmp_path, "L1", [])
    with caplog.at_level(logging.WARNING):
        writer.write_step(7, 0, _records(6))
        writer.settle()
    assert "direction file of step 7 was not written" in caplog.text and "No space left" in caplog.text
    written = sorted(path.name for path in (tmp_path / "rank0" / "step7").glob("*.npy"))
    assert written == [f"layer{i}.weight.npy" for i in (0, 1, 2, 4, 5)]
    assert (tmp_path / "rank0" / "grad_summary_7.csv").exists()
