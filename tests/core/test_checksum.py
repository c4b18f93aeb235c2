"""The md5 field is zlib's CRC-32, whichever implementation computes it."""

import zlib

import numpy as np
import pytest

from msprobe.core.dump.checksum import crc32_hex


@pytest.mark.parametrize("dtype", [np.float32, np.float16, np.int64, np.uint8, np.bool_])
@pytest.mark.parametrize("size", [0, 1, 7, 4099, 1 << 16])
def test_crc32_hex_is_zlib_crc32_as_eight_hex_digits(dtype, size):
    values = (np.random.default_rng(size).standard_normal(size) * 100).astype(dtype)
    raw = values.reshape(-1).view(np.uint8)
    assert crc32_hex(raw) == f"{zlib.crc32(values.tobytes()) & 0xFFFFFFFF:08x}"
    assert len(crc32_hex(raw)) == 8
