"""Which entries a run keeps: ``scope``, ``list`` and ``data_mode`` of the config."""

from __future__ import annotations

import re

REGEX_PREFIX = "name-regex("


class NameFilter:
    """The ``list`` field: full names, API kinds (substrings), module names, ``name-regex(...)``."""

    def __init__(self, items: list[str]):
        self.plain: list[str] = []
        self.patterns: list[re.Pattern[str]] = []
        for item in items:
            if item.startswith(REGEX_PREFIX) and item.endswith(")"):
                self.patterns.append(re.compile(item[len(REGEX_PREFIX) : -1]))
            else:
                self.plain.append(item)
        self.active = bool(items)

    def matches(self, name: str) -> bool:
        if not self.active:
            return True
        return any(item in name for item in self.plain) or any(p.search(name) for p in self.patterns)


class DataModeFilter:
    """``data_mode``: all, or any combination of forward/backward and input/output."""

    def __init__(self, modes: list[str]):
        modes = modes or ["all"]
        everything = "all" in modes
        directions = {m for m in modes if m in ("forward", "backward")}
        sides = {m for m in modes if m in ("input", "output")}
        self.forward = everything or not directions or "forward" in directions
        self.backward = everything or not directions or "backward" in directions
        self.inputs = everything or not sides or "input" in sides
        self.outputs = everything or not sides or "output" in sides

    def keeps(self, direction: str) -> bool:
        return self.forward if direction == "forward" else self.backward


class ScopeFilter:
    """``scope``: keep what runs from the first named entry to the second (inclusive)."""

    def __init__(self, scope: list[str]):
        self.start: str | None = scope[0] if scope else None
        self.end: str | None = scope[1] if scope else None
        self.inside = not scope
        self.finished = False

    def enter(self, name: str) -> None:
        if self.start is not None and not self.finished and name == self.start:
            self.inside = True

    def leave(self, name: str) -> None:
        if self.end is not None and self.inside and name == self.end:
            self.inside = False
            self.finished = True

    def reset(self) -> None:
        self.inside = self.start is None
        self.finished = False
