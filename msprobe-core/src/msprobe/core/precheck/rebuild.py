"""Turning dump.json values back into call arguments: the inverse of msprobe.core.dump.values.

The framework supplies how a tensor summary becomes a tensor and how its own
objects (dtypes, devices...) come back; the plain Python values are decoded
here, once for both frameworks.
"""

from __future__ import annotations

import zlib
from collections.abc import Callable
from typing import Any

import numpy as np


class Unsupported(Exception):
    """The call cannot be rebuilt from the dump; the message says why."""


def decode(encoded: Any, tensor: Callable[[dict], Any], framework_object: Callable[[str, dict], Any]) -> Any:
    """Rebuild one value; ``framework_object(type, encoded)`` handles types such as torch.dtype."""
    if encoded is None:
        return None
    if isinstance(encoded, list):
        return [decode(item, tensor, framework_object) for item in encoded]
    if not isinstance(encoded, dict):
        raise Unsupported(f"unexpected value {encoded!r}")
    kind = encoded.get("type")
    if kind is None:
        return {key: decode(item, tensor, framework_object) for key, item in encoded.items()}
    if "dtype" in encoded:
        return tensor(encoded)
    raw = encoded.get("value")
    if kind in ("int", "bool", "str"):
        return raw
    if kind == "float":
        return float(raw)
    if kind == "slice":
        return slice(*raw)
    if kind == "ellipsis":
        return Ellipsis
    return framework_object(kind, encoded)


def seeded_rng(name: str) -> np.random.Generator:
    """Generated inputs depend on the API's name only, so a resumed run sees the same ones."""
    return np.random.default_rng(zlib.crc32(name.encode()))


def bound(value: Any, default: float) -> float:
    """A recorded Max/Min as a finite float, or the default."""
    try:
        number = float(value)
    except (TypeError, ValueError):
        return default
    return number if np.isfinite(number) else default


def rebuild_call(dump: Any, name: str, value: Callable[[Any], Any]) -> tuple[Any, Any, Any]:
    """The forward call ``name`` as (args, kwargs, output gradients or None), decoded with ``value``.

    The gradients are those that arrived at the outputs in backward, from the
    dump's ``{api}.backward`` entry when it has one.
    """
    entry = dump.data[name]
    args = value(entry.get("input_args", []))
    kwargs = value(entry.get("input_kwargs", {}))
    backward = dump.data.get(name[: -len("forward")] + "backward")
    return args, kwargs, value(backward.get("input", [])) if backward else None
