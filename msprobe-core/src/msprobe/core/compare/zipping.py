"""A zip archive written in one pass from members already deflated, for the xlsx package.

The compare deflates its sheet's rows as it makes them, so that the package's
slowest step is spread over the run instead of waiting at its end. Pieces
made by separate compressors join into one deflate stream when every piece
but the last ends on a sync flush (a byte-aligned, non-final block), and
their CRC-32 values combine without the data (``crc32_combine``, as zlib
does). :mod:`zipfile` can only deflate what it is given, so the archive's
headers are written here; ZIP64 fields are added where a size or an offset
needs them.
"""

from __future__ import annotations

import shutil
import struct
import zlib
from dataclasses import dataclass
from typing import IO

try:  # zlib-ng at level 2: about twice zlib's level 1 speed, with a smaller file
    from zlib_ng import zlib_ng as deflater

    LEVEL = 2
except ImportError:
    deflater, LEVEL = zlib, 1  # type: ignore[assignment]

_POLYNOMIAL = 0xEDB88320  # CRC-32, reflected
_FULL = 0xFFFFFFFF  # a 32-bit field that says "see the ZIP64 field"
_ZIP64_FROM = _FULL  # sizes and offsets from here on take ZIP64 fields
_DOS_TIME = (0, (1980 - 1980) << 9 | 1 << 5 | 1)  # 1980-01-01 00:00, as XlsxWriter writes its members


def _multiply(a: int, b: int) -> int:
    """a * b modulo the CRC polynomial, both reflected (zlib's multmodp)."""
    m, product = 1 << 31, 0
    while True:
        if a & m:
            product ^= b
            if not a & (m - 1):
                return product
        m >>= 1
        b = (b >> 1) ^ _POLYNOMIAL if b & 1 else b >> 1


_POWERS = [1 << 30]  # x^(2^k) modulo the polynomial: x^1, x^2, x^4, ...
for _ in range(31):
    _POWERS.append(_multiply(_POWERS[-1], _POWERS[-1]))


def crc32_combine(first: int, second: int, second_length: int) -> int:
    """The CRC-32 of A + B from crc32(A), crc32(B) and len(B): crc32(A) times x^(8 len(B)), plus crc32(B)."""
    power, n, k = 1 << 31, second_length, 3  # x^0; 8 bits a byte is x^(2^3) per byte
    while n:
        if n & 1:
            power = _multiply(_POWERS[k & 31], power)
        n >>= 1
        k += 1
    return _multiply(power, first) ^ second


class DeflatedPart:
    """Bytes deflated as they come into ``sink``, ended by a sync flush: a middle piece of a member's stream.
    ``crc``, ``size`` and ``compressed`` describe it once :meth:`end` has run. (A thread deflating beside the
    compare was tried: with the helper process on the other core it made the compare slower.)"""

    def __init__(self, sink: IO[bytes], level: int = LEVEL):
        self._sink = sink
        self._compressor = deflater.compressobj(level, zlib.DEFLATED, -15)
        self.crc = self.size = self.compressed = 0

    def write(self, data: bytes) -> None:
        self.crc = deflater.crc32(data, self.crc)
        self.size += len(data)
        self._put(self._compressor.compress(data))

    def end(self) -> None:
        self._put(self._compressor.flush(zlib.Z_SYNC_FLUSH))

    def _put(self, data: bytes) -> None:
        if data:
            self._sink.write(data)
            self.compressed += len(data)


def deflate_bytes(data: bytes, last: bool, level: int = LEVEL) -> tuple[bytes, int]:
    """``data`` as one piece of a member's stream, and its CRC-32."""
    compressor = deflater.compressobj(level, zlib.DEFLATED, -15)
    return compressor.compress(data) + compressor.flush(zlib.Z_FINISH if last else zlib.Z_SYNC_FLUSH), zlib.crc32(data)


@dataclass
class _Entry:
    name: bytes
    crc: int
    size: int
    compressed: int
    offset: int


class ZipWriter:
    """Members written one after another to ``handle`` (open for writing, at its start), every one deflated;
    :meth:`close` writes the central directory."""

    def __init__(self, handle: IO[bytes]):
        self._handle, self._entries, self._position = handle, [], 0

    def add(self, name: str, data: bytes, level: int = LEVEL) -> None:
        """A small member, deflated here."""
        compressed, crc = deflate_bytes(data, last=True, level=level)
        self.add_deflated(name, [compressed], crc, len(data))

    def add_deflated(self, name: str, pieces: list[bytes | IO[bytes]], crc: int, size: int) -> None:
        """A member whose deflate stream is ``pieces`` in order (bytes, or files read from where they stand)
        holding ``size`` bytes of CRC-32 ``crc``; a file piece is read to its end."""
        encoded = name.encode("ascii")
        compressed = sum(len(p) if isinstance(p, bytes) else _remaining(p) for p in pieces)
        entry = _Entry(encoded, crc, size, compressed, self._position)
        large = size >= _ZIP64_FROM or compressed >= _ZIP64_FROM
        extra = struct.pack("<HHQQ", 1, 16, size, compressed) if large else b""
        sizes = (_FULL, _FULL) if large else (compressed, size)
        header = struct.pack(
            "<4sHHHHHLLLHH", b"PK\x03\x04", 45 if large else 20, 0, 8, *_DOS_TIME, crc, *sizes, len(encoded), len(extra)
        )
        self._write(header + encoded + extra)
        for piece in pieces:
            if isinstance(piece, bytes):
                self._write(piece)
            else:
                start = self._handle.tell()
                shutil.copyfileobj(piece, self._handle, 1 << 20)
                self._position += self._handle.tell() - start
        self._entries.append(entry)

    def close(self) -> None:
        start = self._position
        for entry in self._entries:
            fields = [entry.size, entry.compressed, entry.offset]
            wide = [value for value in fields if value >= _ZIP64_FROM]
            extra = b""
            if wide:  # ZIP64: the fields that do not fit, in this order
                extra = struct.pack(f"<HH{len(wide)}Q", 1, 8 * len(wide), *wide)
                fields = [_FULL if value >= _ZIP64_FROM else value for value in fields]
            version = 45 if wide else 20
            header = struct.pack(
                "<4sHHHHHHLLLHHHHHLL", b"PK\x01\x02", version, version, 0, 8, *_DOS_TIME, entry.crc, fields[1],
                fields[0], len(entry.name), len(extra), 0, 0, 0, 0, fields[2],
            )  # fmt: skip
            self._write(header + entry.name + extra)
        size, count = self._position - start, len(self._entries)
        large = start >= _ZIP64_FROM or size >= _ZIP64_FROM or count >= 0xFFFF
        if large:
            record = self._position
            self._write(struct.pack("<4sQHHLLQQQQ", b"PK\x06\x06", 44, 45, 45, 0, 0, count, count, size, start))
            self._write(struct.pack("<4sLQL", b"PK\x06\x07", 0, record, 1))
        entries = min(count, 0xFFFF)
        ends = (_FULL, _FULL) if large else (size, start)
        self._write(struct.pack("<4sHHHHLLH", b"PK\x05\x06", 0, 0, entries, entries, *ends, 0))

    def _write(self, data: bytes) -> None:
        self._handle.write(data)
        self._position += len(data)


def _remaining(handle: IO[bytes]) -> int:
    here = handle.tell()
    end = handle.seek(0, 2)
    handle.seek(here)
    return end - here
