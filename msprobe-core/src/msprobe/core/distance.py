"""How far one tensor's statistics are from another's: the one rule the diagnosis and the graph page share.

Each of Max, Min, Mean and Norm is compared as a relative difference against the larger of the benchmark's own
statistic and the benchmark tensor's root mean square (its norm over the square root of its element count): the
reference tool divides by the statistic alone, so a mean near zero (every LayerNorm output) would read noise in
its last digits as an error of 100%. A statistic that is inf or nan on one side and not the same on the other, or
that differs where the scale is zero, is infinitely far.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any


def _number(value: Any) -> float | None:
    return float(value) if isinstance(value, (int, float)) and not isinstance(value, bool) else None


def same_number(a: float | None, b: float | None) -> bool:
    """Equal as recorded statistics are: nan equals nan, and an absent value only another absent one."""
    if a is None or b is None:
        return a is None and b is None
    return a == b or (math.isnan(a) and math.isnan(b))


def statistics_distance(ours: Sequence[Any], theirs: Sequence[Any], count: int) -> float | None:
    """The largest relative difference of the statistics (Max, Min, Mean, Norm) known on both sides; None when
    none is. ``count``: the benchmark tensor's number of elements."""
    norm = _number(theirs[3]) if len(theirs) > 3 else None
    rms = abs(norm) / math.sqrt(count or 1) if norm is not None and math.isfinite(norm) else 0.0
    errors = []
    for a, b in zip(map(_number, ours), map(_number, theirs)):
        if a is None or b is None:
            continue
        if not (math.isfinite(a) and math.isfinite(b)):
            errors.append(0.0 if same_number(a, b) else math.inf)
            continue
        scale = max(abs(b), rms)
        if scale > 0:
            errors.append(abs(a - b) / scale)
        elif a != b:
            errors.append(math.inf)
        else:
            errors.append(0.0)
    return max(errors) if errors else None
