"""The ``md5`` field of a dump entry: CRC-32 of a tensor's bytes, as 8 hex digits.

The reference tool calls it md5 but computes ``zlib.crc32``; the same
polynomial is kept so checksums from either tool compare equal. zlib-ng's
CRC-32 (vectorised, much faster on large tensors) gives the same
values; the standard library's stands in when it is not installed.
"""

from __future__ import annotations

from typing import Any

try:
    from zlib_ng.zlib_ng import crc32 as _crc32
except ImportError:  # pragma: no cover - a dependency of msprobe-core, optional on exotic platforms
    from zlib import crc32 as _crc32


def crc32(data: Any, running: int = 0) -> int:
    """CRC-32 of a bytes-like object (a contiguous numpy array is read in place, not copied).

    ``running``: the CRC of the bytes before these, to checksum a long run of bytes in pieces.
    """
    return _crc32(data, running) & 0xFFFFFFFF


def crc32_hex(data: Any) -> str:
    return f"{crc32(data):08x}"


def xor_hex(data: Any) -> str:
    """``summary_mode: "xor"`` (mindstudio-probe 26.x): the XOR of the bytes read as little-endian 64-bit words,
    the last one zero-padded, as 16 hex digits. Cheaper than CRC-32 on a device, where it is one reduction."""
    import numpy as np

    if isinstance(data, np.ndarray):
        raw = np.ascontiguousarray(data).reshape(-1).view(np.uint8)
    else:
        raw = np.frombuffer(memoryview(data).cast("B"), dtype=np.uint8)
    if raw.size % 8:
        raw = np.concatenate([raw, np.zeros(8 - raw.size % 8, np.uint8)])
    value = int(np.bitwise_xor.reduce(raw.view("<u8"))) if raw.size else 0
    return f"{value:016x}"
