"""The xlsx package's zip writer: deflate pieces joined into one member, CRC-32 combined without the data, and
ZIP64 fields where sizes or offsets need them; Python's zipfile and Info-ZIP's unzip are the judges."""

from __future__ import annotations

import io
import shutil
import subprocess
import tempfile
import zipfile
import zlib

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from msprobe.core.compare import zipping
from msprobe.core.compare.zipping import DeflatedPart, ZipWriter, crc32_combine, deflate_bytes


@settings(max_examples=200, deadline=None)
@given(st.binary(max_size=300), st.binary(max_size=300))
def test_combined_crc_equals_the_crc_of_the_joined_bytes(first, second):
    assert crc32_combine(zlib.crc32(first), zlib.crc32(second), len(second)) == zlib.crc32(first + second)


def test_combined_crc_of_a_long_second_part():
    second = bytes(range(256)) * 40_000  # 10 MB: the length's high bits take part
    assert crc32_combine(zlib.crc32(b"head"), zlib.crc32(second), len(second)) == zlib.crc32(b"head" + second)


def _archive(head: bytes, middle: list[bytes], tail: bytes) -> bytes:
    buffer, rows = io.BytesIO(), tempfile.TemporaryFile()
    part = DeflatedPart(rows)
    for block in middle:
        part.write(block)
    part.end()
    rows.seek(0)
    head_piece, head_crc = deflate_bytes(head, last=False)
    tail_piece, tail_crc = deflate_bytes(tail, last=True)
    crc = crc32_combine(crc32_combine(head_crc, part.crc, part.size), tail_crc, len(tail))
    writer = ZipWriter(buffer)
    writer.add("first.xml", b"<a/>" * 50)
    writer.add_deflated("sheet.xml", [head_piece, rows, tail_piece], crc, len(head) + part.size + len(tail))
    writer.add("last.xml", b"")
    writer.close()
    rows.close()
    return buffer.getvalue()


@pytest.mark.parametrize("deflater", ["zlib-ng", "zlib"])
@pytest.mark.parametrize("middle", [[], [b""], [b"<row>x</row>" * 1000, b"y" * 70_000, bytes(range(256)) * 300]])
def test_pieces_join_into_one_member_that_zipfile_reads(middle, deflater, monkeypatch):
    if deflater == "zlib":  # where zlib-ng is missing
        monkeypatch.setattr(zipping, "deflater", zlib)
    data = _archive(b"<head>", middle, b"</tail>")
    with zipfile.ZipFile(io.BytesIO(data)) as archive:
        assert archive.testzip() is None
        assert archive.namelist() == ["first.xml", "sheet.xml", "last.xml"]
        assert archive.read("sheet.xml") == b"<head>" + b"".join(middle) + b"</tail>"
        assert archive.read("first.xml") == b"<a/>" * 50 and archive.read("last.xml") == b""


def test_zip64_fields_where_sizes_and_offsets_do_not_fit(monkeypatch, tmp_path):
    """With the 32-bit limit lowered, every size and offset past it takes the ZIP64 path a 4 GiB sheet would."""
    monkeypatch.setattr(zipping, "_ZIP64_FROM", 100)
    middle = [bytes(range(256)) * 20]
    data = _archive(b"<head>" * 30, middle, b"</tail>")
    path = tmp_path / "small_limit.zip"
    path.write_bytes(data)
    assert b"PK\x06\x06" in data and b"PK\x06\x07" in data  # the ZIP64 end records
    with zipfile.ZipFile(path) as archive:  # zipfile trusts the ZIP64 fields only where the 32-bit ones are full
        assert archive.read("sheet.xml") == b"<head>" * 30 + middle[0] + b"</tail>"
        assert archive.read("last.xml") == b""
    if shutil.which("unzip"):
        assert subprocess.run(["unzip", "-tq", str(path)], capture_output=True).returncode == 0
