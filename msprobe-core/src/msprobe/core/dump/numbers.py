"""Numbers in dump.json, the same way for every backend.

JSON has no inf or nan: the reference writes them as the strings "inf",
"-inf" and "nan". A float32 mean is the float32 rounding of sum / count,
computed here in Python from the framework's sum, which is what its mean
kernel returns, and cheaper than a second pass over the tensor.
"""

from __future__ import annotations

import math
import struct
from typing import Any

_FLOAT32 = struct.Struct("f")
_EXACT_FLOAT32_COUNT = 1 << 24  # element counts up to here are exact in float32


def json_number(value: Any) -> Any:
    """``value``, or its text when it is an inf or nan float."""
    if isinstance(value, float) and not math.isfinite(value):
        return str(value)
    return value


def float32_mean(total: float, count: int) -> float:
    """float32(total) / float32(count), correctly rounded to float32.

    The double quotient rounded to float32 is the float32 quotient: double
    has more than twice float32's precision, so rounding twice loses nothing.
    A count beyond 2**24 is first rounded to float32, as a float32 kernel
    sees it.
    """
    if count > _EXACT_FLOAT32_COUNT:
        count = _FLOAT32.unpack(_FLOAT32.pack(count))[0]
    return _FLOAT32.unpack(_FLOAT32.pack(total / count))[0]
