"""Calls a declared layout makes for itself inside a module (``"calls": "own"`` in config.json's
``tensor_parallel``), left out of both runs so the module is compared at its boundary.

A vocab-parallel embedding masks the tokens outside its rows, looks the rest up and zeroes the masked ones
before its all-reduce: five calls where the global run makes one lookup, and none of them pairs with it. The
module's own entry (its input, its reduced output, its sharded weight and that weight's gradient) still
compares. Each API's later calls close up their counts (``Tensor.__sub__.3`` becomes ``Tensor.__sub__.2``
when one subtraction inside is left out), so the two runs' names pair again after the module.
"""

from __future__ import annotations

import bisect
from collections.abc import Iterable
from dataclasses import replace
from fnmatch import fnmatch
from typing import Any

from msprobe.core.dump.entry_names import module_path, parse_entry
from msprobe.core.dump.reader import Dump

OWN = "own"


def own_patterns(layouts: Iterable[dict[str, Any] | None]) -> list[str]:
    """The module patterns whose calls are the layout's own, in the ``parallel`` headers given (unchecked here:
    the merge checks the declaration and names what is malformed)."""
    patterns: list[str] = []
    for layout in layouts:
        declared = (layout or {}).get("tensor_parallel")
        modules = declared.get("modules") if isinstance(declared, dict) else None
        if not isinstance(modules, dict):
            continue
        for pattern, rule in modules.items():
            if isinstance(rule, dict) and rule.get("calls") == OWN and pattern not in patterns:
                patterns.append(str(pattern))
    return patterns


def _inside(parent: Any, patterns: list[str]) -> bool:
    path = module_path(parent) if isinstance(parent, str) else None
    if path is None:
        return False
    # under DDP every path starts with the wrapper's "module."
    return any(fnmatch(path, pattern) or fnmatch(path.removeprefix("module."), pattern) for pattern in patterns)


def without_own_calls(dump: Dump, patterns: list[str]) -> Dump:
    """``dump`` with the API calls made inside the modules ``patterns`` name left out, forward and backward
    (a backward has no parent module in construct.json; it shares its forward's count), and the counts of the
    calls after them closed up. The same dump when there is nothing to leave out."""
    if not patterns:
        return dump
    gone: dict[str, set[int]] = {}
    construct = dump.construct or {}
    for name in dump.data:
        parsed = parse_entry(name)
        if parsed is None or parsed.is_module or parsed.count is None:
            continue
        if _inside(construct.get(name), patterns):
            gone.setdefault(parsed.kind, set()).add(parsed.count)
    if not gone:
        return dump
    counts = {kind: sorted(numbers) for kind, numbers in gone.items()}
    renames: dict[str, str | None] = {}
    for name in [*dump.data, *construct, *(dump.stack or {})]:
        if name in renames:
            continue
        parsed = parse_entry(name)
        if parsed is None or parsed.is_module or parsed.count is None or parsed.kind not in counts:
            renames[name] = name
        elif parsed.count in gone[parsed.kind]:
            renames[name] = None
        else:
            closed = parsed.count - bisect.bisect_left(counts[parsed.kind], parsed.count)
            renames[name] = replace(parsed, count=closed).format()

    def kept(mapping: dict[str, Any], parents: bool = False) -> dict[str, Any]:
        out = {}
        for name, value in mapping.items():
            new = renames.get(name, name)
            if new is None:
                continue
            out[new] = (renames.get(value) or value) if parents and isinstance(value, str) else value
        return out

    return replace(dump, data=kept(dump.data), construct=kept(construct, parents=True), stack=kept(dump.stack or {}))
