"""write_npy: numpy.save's bytes, one system call, no partial file."""

from __future__ import annotations

import numpy as np
import pytest

from msprobe.core.dump.npy_file import write_npy
from msprobe.core.errors import DataFileError

ARRAYS = [
    np.arange(12, dtype=np.float32).reshape(3, 4),
    np.float64(2.5) * np.ones(()),
    np.zeros((2, 0, 5), np.float16),
    np.array([True, False, True]),
    np.arange(-4, 4, dtype=np.int8),
    np.arange(6, dtype=np.int64).reshape(2, 3),
    np.arange(6, dtype=np.uint8),
    np.array([1 + 2j, 3 - 1j], np.complex64),
    np.arange(4, dtype=">f4"),  # big-endian
    np.ones((1,) * 30, np.float32),  # many dimensions
    np.arange(12, dtype=np.float32).reshape(3, 4).T,  # Fortran-ordered: numpy.save writes it
    np.arange(20, dtype=np.float32)[::2],  # strided
    np.zeros(2, dtype=[("a", "<i4"), ("b", "<f8")]),  # structured
]


@pytest.mark.parametrize("array", ARRAYS, ids=lambda array: f"{array.dtype.str}{array.shape}")
def test_bytes_equal_numpy_save(tmp_path, array):
    write_npy(tmp_path / "ours.npy", array)
    np.save(tmp_path / "numpy.npy", array)
    assert (tmp_path / "ours.npy").read_bytes() == (tmp_path / "numpy.npy").read_bytes()
    loaded = np.load(tmp_path / "ours.npy")
    assert loaded.dtype == array.dtype and loaded.shape == array.shape
    np.testing.assert_array_equal(loaded, array)
    assert (tmp_path / "ours.npy").stat().st_mode & 0o777 == 0o640


def test_a_symlink_is_not_written_through(tmp_path):
    target = tmp_path / "target"
    target.write_text("kept")
    (tmp_path / "link.npy").symlink_to(target)
    with pytest.raises(DataFileError, match="link.npy"):
        write_npy(tmp_path / "link.npy", np.ones(3))
    assert target.read_text() == "kept"


def test_a_failed_write_leaves_no_partial_file(tmp_path, monkeypatch):
    from msprobe.core import files as writer

    def disk_full(fd, views):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(writer, "_writev", disk_full)
    with pytest.raises(OSError):
        write_npy(tmp_path / "a.npy", np.ones(1000))
    assert not (tmp_path / "a.npy").exists()
