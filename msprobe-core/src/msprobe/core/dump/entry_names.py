"""The grammar of dump.json's entry names, in one place: every reader parses and writes names through it.

Three forms, as mindstudio-probe writes them and both backends record them:

- an API call: ``{Prefix}.{api}.{count}.{direction}`` (``Functional.linear.3.forward``,
  ``Tensor.__add__.0.backward``, ``Distributed.all_reduce.1.forward``, ``Aten.mm.default.0.forward``);
- a module (PyTorch) or cell (MindSpore) call: ``{Module|Cell}.{path}.{Class}.{direction}.{count}``
  (``Module.layers.0.mlp.MLP.forward.0``);
- a module's parameter gradients: ``{Module|Cell}.{path}.{Class}.parameters_grad``.

A data item inside an entry (a row of a compare) adds ``.{input|output}.{index}`` and, for nested values,
more indices: ``Functional.linear.0.forward.input.1``.
"""

from __future__ import annotations

import functools
import re
from dataclasses import dataclass

FORWARD, BACKWARD = "forward", "backward"
MODULE_PREFIXES = ("Module", "Cell")
PARAMETERS_GRAD = "parameters_grad"

_API = re.compile(r"^(?P<kind>.+)\.(?P<count>\d+)\.(?P<direction>forward|backward)$")
_MODULE = re.compile(
    r"^(?P<prefix>Module|Cell)\.(?P<path>.+)\.(?P<cls>[^.]+)\."
    r"(?:(?P<direction>forward|backward)\.(?P<count>\d+)|(?P<grads>parameters_grad))$"
)
_ITEM = re.compile(r"^(?P<entry>.+?\.(?:forward|backward))\.(?P<side>input|output)\.(?P<index>\d+)(?P<rest>.*)$")


@dataclass(frozen=True)
class EntryName:
    """One entry name, parsed. ``kind`` is what the count numbers: an API (``Functional.linear``) or a module
    call (``Module.fc.Linear``); ``direction`` is empty for parameter gradients."""

    prefix: str
    kind: str
    direction: str
    count: int | None = None
    path: str | None = None  # a module's path in the model (modules and parameter gradients only)
    cls: str | None = None  # a module's class

    @property
    def is_module(self) -> bool:
        return self.path is not None

    @property
    def is_parameters_grad(self) -> bool:
        return self.path is not None and self.count is None

    @property
    def phase(self) -> str:
        """forward or backward; parameter gradients are made in the backward."""
        return self.direction or BACKWARD

    def without_count(self) -> str:
        """The name with its count left out: what pairs calls of one kind in their order (``Functional.linear.
        forward``, ``Module.fc.Linear.forward``)."""
        return f"{self.kind}.{self.direction or PARAMETERS_GRAD}"

    def without_class(self) -> str:
        """A module's name with its class left out (across frameworks the classes differ); others unchanged."""
        if not self.is_module:
            return self.format()
        tail = PARAMETERS_GRAD if self.is_parameters_grad else f"{self.direction}.{self.count}"
        return f"{self.prefix}.{self.path}.{tail}"

    def format(self) -> str:
        if self.is_parameters_grad:
            return f"{self.kind}.{PARAMETERS_GRAD}"
        if self.is_module:
            return f"{self.kind}.{self.direction}.{self.count}"
        return f"{self.kind}.{self.count}.{self.direction}"


@functools.lru_cache(maxsize=1 << 16)
def parse_entry(name: str) -> EntryName | None:
    """The parts of an entry name; None for a name of no known form. Cached: a compare, a graph and a diagnosis
    each ask about the same names many times, and the answer is immutable."""
    found = _MODULE.match(name)
    if found is not None:
        kind = f"{found['prefix']}.{found['path']}.{found['cls']}"
        count = None if found["grads"] else int(found["count"])
        return EntryName(found["prefix"], kind, found["direction"] or "", count, found["path"], found["cls"])
    found = _API.match(name)
    if found is not None:
        kind = found["kind"]
        return EntryName(kind.split(".", 1)[0], kind, found["direction"], int(found["count"]))
    return None


def module_entry(prefix: str, path: str, cls: str, direction: str, count: int | None = None) -> str:
    """A module's entry name, or its parameter gradients' when ``direction`` is ``parameters_grad``."""
    if direction == PARAMETERS_GRAD:
        return f"{prefix}.{path}.{cls}.{PARAMETERS_GRAD}"
    return f"{prefix}.{path}.{cls}.{direction}.{count}"


def module_path(name: str) -> str | None:
    """``Module.blocks.0.fc.Linear.forward.0`` (or its ``parameters_grad``) -> ``blocks.0.fc``; None for an
    API's entry."""
    parsed = parse_entry(name)
    return parsed.path if parsed is not None else None


def kind_of(name: str) -> str:
    """What a name's count numbers (``Functional.linear``, ``Module.fc.Linear``): a warning said once per API
    or module is said once per kind; a name of no known form is its own kind."""
    parsed = parse_entry(name)
    return parsed.kind if parsed is not None else name


def direction(name: str) -> str:
    """forward or backward (parameter gradients: backward); empty for a name of no known form."""
    parsed = parse_entry(name)
    return parsed.phase if parsed is not None else ""


@dataclass(frozen=True)
class ItemName:
    """A data item of an API entry: ``{entry}.{input|output}.{index}{rest}``."""

    entry: str
    side: str
    index: int
    rest: str

    def format(self) -> str:
        return f"{self.entry}.{self.side}.{self.index}{self.rest}"


def parse_item(name: str) -> ItemName | None:
    """An API entry's data item name, parsed; None for a module's item or a name of another form."""
    found = _ITEM.match(name)
    return None if found is None else ItemName(found["entry"], found["side"], int(found["index"]), found["rest"])
