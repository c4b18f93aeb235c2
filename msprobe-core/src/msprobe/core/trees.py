"""Walking nested call arguments (lists, tuples, dicts) for whatever the framework calls a leaf, and dump.json
values for their tensor summaries."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any


def map_leaves(value: Any, is_leaf: Callable[[Any], bool], function: Callable[[Any], Any]) -> Any:
    """A copy of ``value`` with ``function`` applied to every leaf; containers keep their types."""
    if is_leaf(value):
        return function(value)
    if isinstance(value, tuple) and hasattr(value, "_fields"):
        return type(value)(*(map_leaves(item, is_leaf, function) for item in value))
    if isinstance(value, (list, tuple)):
        return type(value)(map_leaves(item, is_leaf, function) for item in value)
    if isinstance(value, dict):
        return {key: map_leaves(item, is_leaf, function) for key, item in value.items()}
    return value


def leaves(value: Any, is_leaf: Callable[[Any], bool]) -> list[Any]:
    found: list[Any] = []
    map_leaves(value, is_leaf, found.append)
    return found


def is_tensor_summary(value: Any) -> bool:
    """A tensor's summary in a dump.json entry (its ``shape`` and ``dtype``, with statistics or a file)."""
    return isinstance(value, dict) and "shape" in value and "dtype" in value and isinstance(value["shape"], list)
