"""Many floats as text, exactly as Python's ``repr`` writes them, several times faster.

A compare table of two million rows holds some thirty million floats, and
``repr`` takes about 0.4 microseconds for each: the largest single cost of
writing the CSV. orjson writes the same shortest round-trip digits in C;
only its notation differs in places, so its text is taken where it is
known to agree with Python's (checked against ``repr`` when the module is
imported, and by the tests), and ``repr`` is used for the rest: inf, nan,
and magnitudes near the points where either switches between plain and
exponent notation.
"""

from __future__ import annotations

import numpy as np
import orjson

# below this orjson writes an exponent (1e-05 and up it writes 0.00001...)
_EXPONENT_FROM = 1e-5
# where orjson and Python choose different notations (Python: plain from 1e-4 up to 1e16, orjson from 1e-5),
# and a margin around 1e16, where both switch
_NEAR_SWITCH = ((1e-5, 1e-4), (1e15, 1e17))


def _kinds(values: list[float]) -> tuple[np.ndarray, np.ndarray]:
    """Where orjson's text is not repr's (inf, nan, near a switch of notation), and where it writes an exponent
    of one digit (Python writes two)."""
    numbers = np.abs(np.array(values, dtype=np.float64))
    with np.errstate(invalid="ignore"):
        odd = ~np.isfinite(numbers)
        for low, high in _NEAR_SWITCH:
            odd |= (numbers >= low) & (numbers < high)
        tiny = (numbers > 0) & (numbers < _EXPONENT_FROM) & ~odd
    return odd, tiny


def packed_float_texts(values: list[float]) -> tuple[bytes, int, list[int], list[str]] | None:
    """``float_texts(values)`` as orjson wrote them, one UTF-8 text joined by commas, with the positions where
    repr's text must be taken instead, and those texts; None where orjson's text cannot be used."""
    if not _FAST or not values:
        return None
    odd, tiny = _kinds(values)
    fixed = np.flatnonzero(odd | tiny).tolist()
    return orjson.dumps(values)[1:-1], len(values), fixed, [repr(values[index]) for index in fixed]


def _fast_texts(values: list[float], suffix: str = "") -> list[str]:
    text = orjson.dumps(values).decode()[1:-1]
    texts = (text.replace(",", suffix + ",") + suffix).split(",") if suffix else text.split(",")
    odd, tiny = _kinds(values)
    for index in np.flatnonzero(odd).tolist():
        texts[index] = repr(values[index]) + suffix
    for index in np.flatnonzero(tiny).tolist():
        number = texts[index][: len(texts[index]) - len(suffix)]
        if number[-2] == "-":  # orjson writes e-7 where Python writes e-07
            texts[index] = number[:-1] + "0" + number[-1] + suffix
    return texts


def _agrees() -> bool:
    """Whether the installed orjson writes what repr writes, on values across the whole range of floats."""
    rng = np.random.default_rng(0)
    probes = rng.integers(0, 2**64, 4000, dtype=np.uint64).view(np.float64).tolist()
    probes += [float(f"{m}e{e}") for e in range(-330, 310) for m in (1, 1.5, 9.999999999999999, 2.5)]
    probes += [0.0, -0.0, 0.1 + 0.2, 1.0, 100.0]
    try:
        return _fast_texts(probes) == [repr(value) for value in probes]
    except Exception:  # an orjson that refuses something: repr for everything
        return False


_FAST = _agrees()


def float_texts(values: list[float], suffix: str = "") -> list[str]:
    """``[repr(v) + suffix for v in values]`` for a list of Python floats (and nothing else)."""
    if not values:
        return []
    if not _FAST:
        return [repr(value) + suffix for value in values]
    return _fast_texts(values, suffix)
