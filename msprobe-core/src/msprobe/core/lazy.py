"""Lazy module attributes (PEP 562), so importing a backend package stays cheap."""

from __future__ import annotations

import importlib
from collections.abc import Callable
from typing import Any


def lazy_exports(package: str, exports: dict[str, str | tuple[str, str]]) -> Callable[[str], Any]:
    """A module ``__getattr__`` that imports ``exports[name]`` only when ``name`` is first used: a module
    holding ``name``, or (module, the name it has there) for a name exported under another."""

    def __getattr__(name: str) -> Any:
        if name in exports:
            where = exports[name]
            module, attribute = where if isinstance(where, tuple) else (where, name)
            return getattr(importlib.import_module(module), attribute)
        raise AttributeError(f"module {package!r} has no attribute {name!r}")

    return __getattr__
