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
    real = grad_probe.collect.write_npy

    def flaky(path, array):
        if path.name == "layer3.weight.npy":
            raise OSError(28, "No space left on device")
        real(path, array)

    monkeypatch.setattr(grad_probe.collect, "write_npy", flaky)
    writer = GradSummaryWriter(tmp_path, "L1", [])
    with caplog.at_level(logging.WARNING):
        writer.write_step(7, 0, _records(6))
        writer.settle()
    assert "direction file of step 7 was not written" in caplog.text and "No space left" in caplog.text
    written = sorted(path.name for path in (tmp_path / "rank0" / "step7").glob("*.npy"))
    assert written == [f"layer{i}.weight.npy" for i in (0, 1, 2, 4, 5)]
    assert (tmp_path / "rank0" / "grad_summary_7.csv").exists()


def test_a_summary_appears_only_once_its_direction_files_are_written(tmp_path, monkeypatch):
    """A process killed while a step's files are written leaves no summary that claims the step complete."""
    import threading

    real = grad_probe.collect.write_npy
    release = threading.Event()

    def slow(path, array):
        if path.name == "layer2.weight.npy":
            release.wait(10)
        real(path, array)

    monkeypatch.setattr(grad_probe.collect, "write_npy", slow)
    writer = GradSummaryWriter(tmp_path, "L1", [])
    writer.write_step(4, 0, _records(5))
    summary = tmp_path / "rank0" / "grad_summary_4.csv"
    assert not summary.exists()  # one direction file still being written
    release.set()
    writer.settle()
    assert summary.exists() and not (tmp_path / "rank0" / ".grad_summary_4.csv.tmp").exists()
    assert len(list((tmp_path / "rank0" / "step4").glob("*.npy"))) == 5


def test_a_step_without_direction_files_has_its_summary_at_once(tmp_path):
    writer = GradSummaryWriter(tmp_path, "L0", [])
    writer.write_step(0, 0, [GradRecord("w", [3], 1.0, 0.0, 1.0, md5="0a1b2c3d")])
    assert (tmp_path / "rank0" / "grad_summary_0.csv").exists()
