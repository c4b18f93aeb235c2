"""ArchiveTemplate: archives any zip reader accepts, data aligned, CRCs right for every file written."""

from __future__ import annotations

import os
import zipfile

import numpy as np
import pytest

from msprobe.core.dump.zip_archive import ArchiveTemplate

RECORDS = [("archive/head", b"fixed text"), ("archive/data/0", b""), ("archive/x", b"1"), ("archive/empty", b"")]


def _data_offset(path, info: zipfile.ZipInfo) -> int:
    raw = path.read_bytes()
    name_length, extra_length = np.frombuffer(raw[info.header_offset + 26 : info.header_offset + 30], "<u2")
    return info.header_offset + 30 + int(name_length) + int(extra_length)


@pytest.mark.parametrize("alignment", [64, 4096])
def test_each_file_is_a_valid_zip_with_its_own_data(tmp_path, alignment):
    template = ArchiveTemplate(RECORDS, "archive/data/0", 24, alignment=alignment)
    for index in range(3):
        data = np.arange(6, dtype=np.float32) * (index + 1)
        path = tmp_path / f"{index}.zip"
        template.write(path, data)
        with zipfile.ZipFile(path) as archive:
            assert archive.testzip() is None  # every CRC-32 matches its record
            assert [info.filename for info in archive.infolist()] == [name for name, _ in RECORDS]
            assert archive.read("archive/data/0") == data.tobytes()
            assert archive.read("archive/head") == b"fixed text"
            assert archive.read("archive/empty") == b""
            for info in archive.infolist():
                assert info.compress_type == zipfile.ZIP_STORED
                assert _data_offset(path, info) % alignment == 0


def test_an_empty_slot_and_a_wrong_size(tmp_path):
    empty = ArchiveTemplate(RECORDS, "archive/data/0", 0)
    empty.write(tmp_path / "e.zip", b"")
    with zipfile.ZipFile(tmp_path / "e.zip") as archive:
        assert archive.testzip() is None and archive.read("archive/data/0") == b""
    with pytest.raises(ValueError, match="5 bytes for a slot of 0"):
        empty.write(tmp_path / "f.zip", b"12345")
    with pytest.raises(ValueError, match="no record"):
        ArchiveTemplate(RECORDS, "archive/data/1", 4)


def test_large_data_is_written_whole(tmp_path):
    data = np.random.default_rng(0).integers(0, 255, 50_000_000, dtype=np.uint8)
    template = ArchiveTemplate(RECORDS, "archive/data/0", data.nbytes)
    template.write(tmp_path / "big.zip", data)
    with zipfile.ZipFile(tmp_path / "big.zip") as archive:
        assert archive.testzip() is None
        assert archive.read("archive/data/0") == data.tobytes()


def test_a_failed_write_leaves_no_file(tmp_path, monkeypatch):
    from msprobe.core import files as writer

    calls = []

    def short_then_full_disk(fd, views):  # one partial write, then the disk is full
        if calls:
            raise OSError(28, "No space left on device")
        calls.append(1)
        return os.write(fd, views[0][:10])

    monkeypatch.setattr(writer, "_writev", short_then_full_disk)
    template = ArchiveTemplate(RECORDS, "archive/data/0", 8)
    with pytest.raises(OSError, match="No space"):
        template.write(tmp_path / "t.zip", np.zeros(2, np.float32))
    assert not (tmp_path / "t.zip").exists()


def test_partial_writes_are_resumed(tmp_path, monkeypatch):
    from msprobe.core import files as writer

    monkeypatch.setattr(writer, "_writev", lambda fd, views: os.write(fd, views[0][:7]))  # 7 bytes at a time
    data = np.arange(100, dtype=np.float32)
    ArchiveTemplate(RECORDS, "archive/data/0", data.nbytes).write(tmp_path / "t.zip", data)
    with zipfile.ZipFile(tmp_path / "t.zip") as archive:
        assert archive.testzip() is None and archive.read("archive/data/0") == data.tobytes()
