"""Max, Min, Mean and Norm of host memory in one pass, for every backend.

The C kernels (``_kernels.c``) read a float32 or float64 tensor once and keep
the sums in double, so Mean and Norm are the correctly rounded values of
the data; the frameworks' own float32 kernels accumulate in float32 and
drift from them by a few units in the last place (torch's norm by up to
4e-6 relative on half a million elements). Both backends use these
kernels for tensors in host memory, so a PyTorch dump and a MindSpore dump
of equal tensors show equal statistics.

Each function returns None where the kernels cannot answer: they were not
built (no C compiler at install time), were switched off with
``MSPROBE_NO_KERNELS=1``, or the data holds an inf or nan, or its float32
norm exceeds float32's range (the caller then measures it its own way,
which also gives the ``*_except_inf_nan`` pair).
"""

from __future__ import annotations

from typing import Any

from msprobe.core.switches import built_extension, switched_off

try:
    from msprobe.core.dump import _kernels
except ImportError:  # built without a C compiler: the frameworks' kernels measure instead
    _kernels = None

if switched_off("MSPROBE_NO_KERNELS"):
    _kernels = None
_kernels = built_extension(_kernels, 2, "msprobe.core.dump._kernels")

AVAILABLE = _kernels is not None  # the one switch every caller reads (tests turn it off to compare)


def c_api() -> Any:
    """The kernels' C-level API (a capsule, as ``_kernels._C_API``) for another extension to call, or None."""
    return _kernels._C_API if AVAILABLE and _kernels is not None else None


FLOAT32, FLOAT64, FLOAT16, BFLOAT16 = "f", "d", "e", "b"

Stats = tuple[float, float, float, float]  # Max, Min, Mean, Norm


def stats_at(address: int, count: int, kind: str) -> Stats | None:
    """Statistics of ``count`` contiguous values of ``kind`` (FLOAT32 or FLOAT64) at ``address``.

    The caller keeps the memory alive and unchanged during the call.
    """
    if not AVAILABLE:
        return None
    return _kernels.float_stats_at(address, count, kind)


def sums_at(address: int, count: int, kind: str) -> tuple[float, float] | None:
    """The sum and the sum of squares, in double, of ``count`` contiguous FLOAT32 or FLOAT64 values at ``address``
    (see ``stats_at``); None without kernels."""
    if not AVAILABLE:
        return None
    return _kernels.float_sums_at(address, count, kind)


def nonfinite_stats_at(address: int, count: int, kind: str) -> tuple[float, ...] | None:
    """For data holding an inf or nan (which ``stats_at`` leaves to the caller): Max, Min, Mean, Norm as torch
    reports them, then the extremes of the finite values (the ``*_except_inf_nan`` pair); None when every value
    is finite, or without kernels."""
    if not AVAILABLE:
        return None
    return _kernels.nonfinite_stats_at(address, count, kind)


def max_relative_of(original: Any, perturbed: Any, small: float) -> float | None:
    """max |perturbed - original| / max(|original|, small) of two float64 arrays of one shape, C-contiguous, in
    one pass; None where a value is inf or nan, or without kernels."""
    if not AVAILABLE:
        return None
    return _kernels.max_relative(original, perturbed, small)


def stats_of(array: Any) -> Stats | None:
    """Statistics of a C-contiguous float32 or float64 buffer (a numpy array)."""
    if not AVAILABLE:
        return None
    return _kernels.float_stats(array)


def any_nonfinite_at(address: int, count: int, kind: str) -> bool | None:
    """Whether an inf or nan is among the values (any float kind, bfloat16 included); None without kernels."""
    if not AVAILABLE:
        return None
    return _kernels.any_nonfinite_at(address, count, kind)


def any_nonfinite_of(array: Any) -> bool | None:
    """Whether a C-contiguous float16, float32 or float64 buffer (a numpy array) holds an inf or nan."""
    if not AVAILABLE:
        return None
    return _kernels.any_nonfinite(array)


def instruction_set() -> str:
    """'avx2', 'generic', or 'none' when the kernels are not in use (reported by ``msprobe plugins``)."""
    return _kernels.instruction_set() if AVAILABLE else "none"
