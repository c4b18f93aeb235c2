"""Walking dump.json entries, for assertions."""

from collections.abc import Iterator
from typing import Any


def leaves(value: Any) -> Iterator[dict]:
    """Every tensor summary (a dict with a dtype) inside an entry, in the order dump.json lists them."""
    if isinstance(value, dict):
        if "dtype" in value:
            yield value
        else:
            for item in value.values():
                yield from leaves(item)
    elif isinstance(value, list):
        for item in value:
            yield from leaves(item)
