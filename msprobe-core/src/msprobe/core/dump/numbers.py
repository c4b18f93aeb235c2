"""Numbers in dump.json, the same way for every backend.

JSON has no inf or nan. The reference writes the tokens ``Infinity``,
``-Infinity`` and ``NaN`` that Python's json module writes and reads, and
its readers refuse text in their place, so ours are those tokens too.

A float32 mean is the float32 rounding of sum / count, computed here in
Python from the framework's sum, which is what its mean kernel returns, and cheaper than a second pass over the tensor.
"""

from __future__ import annotations

import math
import struct
from typing import Any

_FLOAT32 = struct.Struct("f")
_EXACT_FLOAT32_COUNT = 1 << 24  # element counts up to here are exact in float32


def no_statistics() -> dict[str, None]:
    """What an empty (or meta) tensor records: the four keys, null, as the reference writes them."""
    return {"Max": None, "Min": None, "Mean": None, "Norm": None}


class NonFinite(float):
    """An inf or nan statistic: a float to every reader in Python, written as Python's json writes it.

    orjson would write a plain inf or nan as null; it hands this subclass to the
    writer's ``default``, which embeds ``json_token``.
    """

    __slots__ = ()

    @property
    def json_token(self) -> str:
        if math.isnan(self):
            return "NaN"
        return "Infinity" if self > 0 else "-Infinity"


def json_number(value: Any) -> Any:
    """``value``, marked as a ``NonFinite`` when it is an inf or nan float."""
    if isinstance(value, float) and not math.isfinite(value) and type(value) is not NonFinite:
        return NonFinite(value)
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
