"""The statistics of a global tensor, rebuilt from the statistics of its pieces, with no tensor at hand.

A piece is a tensor summary of dump.json (``shape``, ``Max``, ``Min``, ``Mean``, ``Norm``, and in a run of
several processes ``Sum`` and ``SumSq`` in float64). The global tensor is made of pieces in one of four ways:

- **tiled** (a shard each, ``Shard(d)``, or a data-parallel batch): the extremes are the pieces' extremes, and
  the sums add up, so the mean and the norm are exact to float64's rounding;
- **summed** (partial sums, ``Partial``): only the sum is known; the extremes and the norm are not;
- **averaged** (a per-rank mean, such as the loss of data parallelism): the mean of the pieces' values;
- **scaled** (a gradient of data parallelism, which each rank computes for its own share of the batch).

Where a piece lacks ``Sum`` (a dump by another tool), its ``Mean`` and ``Norm`` stand in for it, which rebuilds
the global mean and norm to the pieces' own rounding (float32 for float32 tensors) instead.
"""

from __future__ import annotations

import math
import struct
from collections.abc import Sequence
from typing import Any

from msprobe.core.dump.numbers import json_number

STATISTICS = ("Max", "Min", "Mean", "Norm")
ARRAY = "_array"  # a piece's tensor, in a tensor dump, carried beside its summary while it is merged
SUMS = ("Sum", "SumSq")
_FLOAT32 = struct.Struct("f")
_MEASURED_IN_FLOAT32 = ("float32", "float16", "bfloat16", "Float32", "Float16", "BFloat16")


def number(value: Any) -> float | None:
    """A statistic as a float: JSON's inf and nan tokens arrive as floats or as the strings of other writers."""
    if value is None or isinstance(value, bool):
        return None
    if isinstance(value, (int, float)):
        return float(value)
    if isinstance(value, str):
        try:
            return float(value)
        except ValueError:
            return None
    return None


def element_count(shape: Sequence[int]) -> int:
    return math.prod(int(size) for size in shape)


def _rounded(value: float | None, dtype: str) -> float | None:
    """A mean or norm as the dump writes it for a tensor of ``dtype``: float32 tensors' in float32."""
    if value is None or not math.isfinite(value):
        return value
    if any(name in dtype for name in _MEASURED_IN_FLOAT32):
        try:
            return _FLOAT32.unpack(_FLOAT32.pack(value))[0]
        except OverflowError:
            return math.copysign(math.inf, value)
    return value


def _sums(piece: dict[str, Any]) -> tuple[float | None, float | None]:
    """(sum, sum of squares) of a piece, from its float64 sums or else from its mean and norm."""
    total, squares = number(piece.get("Sum")), number(piece.get("SumSq"))
    if total is not None and squares is not None:
        return total, squares
    count = element_count(piece.get("shape") or [])
    mean, norm = number(piece.get("Mean")), number(piece.get("Norm"))
    return (None if mean is None else mean * count), (None if norm is None else norm * norm)


def _finish(merged: dict[str, Any], total: float | None, squares: float | None, exact: bool) -> dict[str, Any]:
    count = element_count(merged["shape"])
    dtype = str(merged.get("dtype", ""))
    merged["Mean"] = _rounded(total / count, dtype) if total is not None and count else None
    merged["Norm"] = _rounded(math.sqrt(squares), dtype) if squares is not None and squares >= 0 else None
    if exact:
        merged["Sum"], merged["SumSq"] = total, squares
    for key in (*STATISTICS, *SUMS):
        if key in merged:
            merged[key] = json_number(merged[key])
    return merged


def _base(pieces: Sequence[dict[str, Any]]) -> dict[str, Any]:
    """The first piece's description, without what belongs to a piece alone."""
    dropped = {*STATISTICS, *SUMS, "md5", "shard", "data_name", "Max_except_inf_nan", "Min_except_inf_nan", ARRAY}
    dropped.add("pieces")
    return {key: value for key, value in pieces[0].items() if key not in dropped}


def _exact(pieces: Sequence[dict[str, Any]]) -> bool:
    return all(number(p.get("Sum")) is not None and number(p.get("SumSq")) is not None for p in pieces)


def _extreme(values: list[float | None], pick: Any) -> float | None:
    known = [value for value in values if value is not None]
    if len(known) != len(values) or not known:
        return None
    if any(math.isnan(value) for value in known):
        return math.nan
    return pick(known)


def tiled(pieces: Sequence[dict[str, Any]], dim: int) -> dict[str, Any]:
    """The pieces side by side along ``dim``: a sharded tensor, or a batch split over data-parallel ranks."""
    merged = _base(pieces)
    shape = list(pieces[0]["shape"])
    shape[dim] = sum(int(piece["shape"][dim]) for piece in pieces)
    merged["shape"] = shape
    merged["Max"] = _extreme([number(p.get("Max")) for p in pieces], max)
    merged["Min"] = _extreme([number(p.get("Min")) for p in pieces], min)
    sums = [_sums(piece) for piece in pieces]
    total = None if any(s[0] is None for s in sums) else math.fsum(s[0] for s in sums)
    squares = None if any(s[1] is None for s in sums) else math.fsum(s[1] for s in sums)
    return _finish(merged, total, squares, _exact(pieces))


def summed(pieces: Sequence[dict[str, Any]]) -> dict[str, Any]:
    """Partial sums, added element by element: only the sum (and so the mean) of the result is known."""
    merged = _base(pieces)
    sums = [_sums(piece)[0] for piece in pieces]
    total = None if any(value is None for value in sums) else math.fsum(sums)
    merged["Max"] = merged["Min"] = None
    merged = _finish(merged, total, None, False)
    if total is not None and _exact(pieces):
        merged["Sum"] = json_number(total)
    return merged


def averaged(pieces: Sequence[dict[str, Any]]) -> dict[str, Any]:
    """Each rank's value of one quantity, averaged (data parallelism's per-rank mean, such as the loss): exact
    for a value of one element, and for larger ones the mean alone is known."""
    merged = _base(pieces)
    count = len(pieces)
    if element_count(pieces[0].get("shape") or []) == 1:
        values = [number(piece.get("Mean")) for piece in pieces]
        if all(value is not None for value in values):
            value = _rounded(math.fsum(values) / count, str(merged.get("dtype", "")))
            merged.update(Max=value, Min=value, Mean=value, Norm=abs(value))
            if _exact(pieces):
                merged.update(Sum=value, SumSq=value * value)
            return {key: json_number(item) for key, item in merged.items()}
    sums = [_sums(piece)[0] for piece in pieces]
    total = None if any(value is None for value in sums) else math.fsum(sums) / count
    merged["Max"] = merged["Min"] = None
    return _finish(merged, total, None, False)


def scaled(piece: dict[str, Any], factor: float) -> dict[str, Any]:
    """A piece times ``factor`` (a power of two in practice, so exact)."""
    merged = dict(piece)
    for key in ("Max", "Min", "Mean", "Sum"):
        value = number(piece.get(key))
        merged[key] = None if value is None else json_number(value * factor)
    if factor < 0:
        merged["Max"], merged["Min"] = merged["Min"], merged["Max"]
    norm = number(piece.get("Norm"))
    merged["Norm"] = None if norm is None else json_number(norm * abs(factor))
    squares = number(piece.get("SumSq"))
    if "SumSq" in piece:
        merged["SumSq"] = None if squares is None else json_number(squares * factor * factor)
    merged.pop("md5", None)  # the bytes are others'
    merged.pop(ARRAY, None)
    return merged


def same(pieces: Sequence[dict[str, Any]]) -> bool:
    """Whether the pieces describe one value: the same shape, dtype, statistics and checksum."""
    first = pieces[0]
    keys = ("shape", "dtype", *STATISTICS, *SUMS, "md5")
    return all(_key_equal(first.get(key), piece.get(key)) for piece in pieces[1:] for key in keys)


def _key_equal(a: Any, b: Any) -> bool:
    if a == b:
        return True
    x, y = number(a), number(b)
    return x is not None and y is not None and math.isnan(x) and math.isnan(y)


CLOSE = 1e-6  # relative: one value, summed in another order (a replicated tensor after an all-reduce)


def close(piece: dict[str, Any], other: dict[str, Any]) -> bool:
    """One value, to the rounding of a sum taken in another order: the same shape, and each statistic known to
    both within ``CLOSE`` of the other's scale."""
    if list(piece.get("shape") or []) != list(other.get("shape") or []):
        return False
    norm = number(other.get("Norm"))
    count = element_count(other.get("shape") or [])
    rms = abs(norm) / math.sqrt(count) if norm is not None and math.isfinite(norm) and count else 0.0
    for key in STATISTICS:
        a, b = number(piece.get(key)), number(other.get(key))
        if a is None or b is None:
            continue
        if not (math.isfinite(a) and math.isfinite(b)):
            if not _key_equal(a, b):
                return False
            continue
        if abs(a - b) > CLOSE * max(abs(b), rms):
            return False
    return True
