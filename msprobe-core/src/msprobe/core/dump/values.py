"""Turn API arguments and results into dump.json values, the reference's way.

Tensors are handed to the framework's summarizer; everything else is
described here, once for both frameworks: ints, floats, bools, strings,
slices, ellipsis, None and nested lists/tuples/dicts; namedtuples and
dataclasses as dicts of their fields. An object neither the core nor the
framework knows is written as null, as the reference writes it.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import is_dataclass
from typing import Any

from msprobe.core.dump.numbers import json_number
from msprobe.core.dump.overflow import LaterScreen

# summarize(tensor, suffix) -> dict ; suffix names the value inside the entry, e.g. "input.0"
Summarize = Callable[[Any, str], dict]
# describe(obj) -> dict or None, for framework objects that are not tensors (dtype, device, Size)
Describe = Callable[[Any], dict | None]


class ValueEncoder:
    """Encodes one entry's values; the framework supplies tensor and object handlers."""

    def __init__(self, tensor_type: type | tuple[type, ...], summarize: Summarize, describe: Describe):
        self.tensor_type = tensor_type  # an isinstance check inline: one call less per value
        self.summarize = summarize
        self.describe = describe
        self._nonfinite = getattr(summarize, "nonfinite", None)
        # nonfinite_later(tensor): True or False now, an item whose finite() waits for a device batch, or None;
        # a summarizer whose screens never wait has none (or None)
        self._nonfinite_later = getattr(summarize, "nonfinite_later", None)

    def encode(self, value: Any, suffix: str) -> Any:
        if isinstance(value, self.tensor_type):
            return self.summarize(value, suffix)
        if value is None:
            return None
        if isinstance(value, bool):
            return {"type": "bool", "value": value}
        if isinstance(value, int):
            return {"type": "int", "value": value}
        if isinstance(value, float):
            return {"type": "float", "value": json_number(value)}
        if isinstance(value, str):
            return {"type": "str", "value": value}
        if isinstance(value, (list, tuple)):
            described = self.describe(value)  # e.g. torch.Size is a tuple
            if described is not None:
                return described
            if isinstance(value, tuple) and hasattr(value, "_fields"):  # a namedtuple: its fields by name
                return self._fields(zip(value._fields, value), suffix)
            return [self.encode(item, f"{suffix}.{index}") for index, item in enumerate(value)]
        if is_dataclass(value) and not isinstance(value, type):
            # every field, set or not (a HuggingFace ModelOutput is one, and a dict of its set fields)
            return self._fields(((field, getattr(value, field)) for field in value.__dataclass_fields__), suffix)
        if isinstance(value, dict):
            return {str(key): self.encode(item, f"{suffix}.{key}") for key, item in value.items()}
        if isinstance(value, slice):
            return {
                "type": "slice",
                "value": [self._plain(value.start), self._plain(value.stop), self._plain(value.step)],
            }
        if value is Ellipsis:
            return {"type": "ellipsis", "value": "..."}
        return self.describe(value)  # None for an object neither side knows, as the reference writes it

    def _fields(self, fields: Any, suffix: str) -> dict:
        return {str(key): self.encode(item, f"{suffix}.{key}") for key, item in fields}

    def _plain(self, value: Any) -> Any:
        if value is None or isinstance(value, (bool, int, float, str)):
            return value
        if isinstance(value, self.tensor_type):
            return self.summarize(value, "slice")
        return str(value)

    def encode_args(self, args: tuple, kwargs: dict, call: str) -> tuple[list, dict]:
        """input_args and input_kwargs; tensor files are named call.input.0, call.input.1 and call.kwargs.key,
        as the reference names them (its tensor-mode compare names the rows after the files)."""
        encoded_args = [self.encode(arg, f"{call}.input.{index}") for index, arg in enumerate(args)]
        encoded_kwargs = {key: self.encode(value, f"{call}.kwargs.{key}") for key, value in kwargs.items()}
        return encoded_args, encoded_kwargs

    def any_nonfinite(self, value: Any) -> bool:
        """Overflow screening: does any tensor (or float) in ``value`` hold inf or nan?

        Asks the summarizer's ``nonfinite(tensor)`` when it has one, which
        measures without building the entry; otherwise encodes and looks.
        """
        nonfinite = self._nonfinite
        if nonfinite is None:
            from msprobe.core.dump.overflow import has_nonfinite

            return has_nonfinite(self.encode_outputs(value, "screen"))
        if isinstance(value, self.tensor_type):
            return nonfinite(value)
        if isinstance(value, float):
            return not math.isfinite(value)
        if isinstance(value, (list, tuple)):
            return any(self.any_nonfinite(part) for part in value)
        if isinstance(value, dict):
            return any(self.any_nonfinite(part) for part in value.values())
        return False

    def screen_later(self, value: Any) -> LaterScreen | None:
        """``any_nonfinite`` without a read from a device: the tensors' sums wait in the summarizer's batch.

        None where some tensor in ``value`` cannot wait (a CPU tensor, an odd
        dtype, no batch): then it is screened now.
        """
        later = self._nonfinite_later
        if later is None:
            return None
        waiting: list[Any] = []
        items = [value]
        while items:
            item = items.pop()
            if isinstance(item, self.tensor_type):
                found = later(item)
                if found is None:
                    return None
                if found is True:
                    return LaterScreen([], known=True)
                if found is not False:
                    waiting.append(found)
            elif isinstance(item, float):
                if not math.isfinite(item):
                    return LaterScreen([], known=True)
            elif isinstance(item, (list, tuple)):
                items.extend(item)
            elif isinstance(item, dict):
                items.extend(item.values())
        return LaterScreen(waiting)

    def encode_outputs(self, output: Any, prefix: str) -> list:
        """The reference always writes an output list, even for a single result."""
        if isinstance(output, (list, tuple)) and self.describe(output) is None:
            return [self.encode(item, f"{prefix}.{index}") for index, item in enumerate(output)]
        return [self.encode(output, f"{prefix}.0")]
