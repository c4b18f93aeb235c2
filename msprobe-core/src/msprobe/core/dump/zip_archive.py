"""Uncompressed zip archives that differ only in one record, written in one system call.

torch's ``.pt`` files are such archives: for tensors of one dtype and shape
every record but the data is the same. A tensor dump writes thousands of
them per step, and building each through a general zip writer costs more
than the disk does. An :class:`ArchiveTemplate` lays out the fixed records
once (local headers with CRC-32 and sizes up front, padding in an extra
field so each record's data starts on an ``alignment`` boundary, as torch's
writer and ``torch.load(mmap=True)`` expect, then the central directory);
each file then costs one CRC of its data, two small copies and a
``writev`` that reads the data from the caller's memory.
"""

from __future__ import annotations

import struct
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from msprobe.core.dump.checksum import crc32
from msprobe.core.files import write_parts

_LOCAL = struct.Struct("<IHHHHHIIIHH")
_CENTRAL = struct.Struct("<IHHHHHHIIIHHHHHII")
_END = struct.Struct("<IHHHHIIH")
_CRC = struct.Struct("<I")
_LOCAL_CRC_AT, _CENTRAL_CRC_AT = 14, 16
_VERSION = 20  # zip 2.0: stored entries, no zip64
_DOS_DATE = 0x21  # 1980-01-01, the earliest a zip header can say
_PADDING_ID = 0x4246  # "FB", the extra field torch's writer pads with
MAX_ARCHIVE_BYTES = (1 << 32) - (1 << 20)  # beyond this a zip needs zip64 records


def _size(content: Any) -> int:
    return content.nbytes if hasattr(content, "nbytes") else len(content)


class ArchiveTemplate:
    """Fixed ``records`` (name, bytes) with one record, ``slot``, of ``slot_size`` bytes filled per file.

    The caller keeps the archive under :data:`MAX_ARCHIVE_BYTES`.
    """

    def __init__(self, records: Sequence[tuple[str, Any]], slot: str, slot_size: int, alignment: int = 64):
        head = bytearray()  # up to the slot's data
        tail = bytearray()  # after it
        directory = bytearray()
        offset = 0
        slot_entry = -1
        for name, content in records:
            in_slot = name == slot
            part = head if slot_entry < 0 else tail
            encoded = name.encode()
            size = slot_size if in_slot else _size(content)
            checksum = 0 if in_slot or not size else crc32(content)
            padding = -(offset + _LOCAL.size + len(encoded)) % alignment
            if 0 < padding < 4:  # an extra field needs four bytes of its own
                padding += alignment
            extra = struct.pack("<HH", _PADDING_ID, padding - 4) + bytes(padding - 4) if padding else b""
            if in_slot:
                self._local_crc = len(part) + _LOCAL_CRC_AT
                slot_entry = len(directory)
            part += _LOCAL.pack(
                0x04034B50, _VERSION, 0, 0, 0, _DOS_DATE, checksum, size, size, len(encoded), len(extra)
            )
            part += encoded + extra
            if not in_slot:
                part += memoryview(content).cast("B") if size else b""
            directory += _CENTRAL.pack(
                0x02014B50, _VERSION, _VERSION, 0, 0, 0, _DOS_DATE, checksum, size, size, len(encoded), 0, 0, 0, 0, 0,
                offset,
            )  # fmt: skip
            directory += encoded
            offset += _LOCAL.size + len(encoded) + len(extra) + size
        if slot_entry < 0:
            raise ValueError(f"no record named {slot!r}")
        self._central_crc = len(tail) + slot_entry + _CENTRAL_CRC_AT
        tail += directory
        tail += _END.pack(0x06054B50, 0, 0, len(records), len(records), len(directory), offset, 0)
        self._head, self._tail, self.slot_size = bytes(head), bytes(tail), slot_size

    def write(self, path: Path, content: Any) -> None:
        """The archive with ``content`` (bytes-like, read in place) in the slot, at ``path``."""
        size = _size(content)
        if size != self.slot_size:
            raise ValueError(f"{path}: {size} bytes for a slot of {self.slot_size}")
        checksum = crc32(content) if size else 0
        head, tail = bytearray(self._head), bytearray(self._tail)
        _CRC.pack_into(head, self._local_crc, checksum)
        _CRC.pack_into(tail, self._central_crc, checksum)
        write_parts(path, [head, memoryview(content).cast("B"), tail] if size else [head, tail])
