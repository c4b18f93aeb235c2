"""Replacing framework APIs with wrappers, and putting them back.

The APIs are the reference's list (``dump/api_names.yaml``): what gets a
name in dump.json is decided there. A wrapper passes the call to a handler
unless the calling thread is already inside a handled call, so only the
outermost framework call is seen. Wrappers are built once and reused on
every ``install()``; ``remove()`` restores every original.
"""

from __future__ import annotations

import functools
import importlib
import importlib.resources
import sys
import threading
from collections.abc import Callable
from typing import Any

import torch
import yaml

# Namespaces of the API list, with the prefix their entries carry.
NAMESPACES = {
    "functional": ("Functional", "torch.nn.functional"),
    "tensor": ("Tensor", "torch.Tensor"),
    "torch": ("Torch", "torch"),
    "distributed": ("Distributed", "torch.distributed"),
    "torch_npu": ("NPU", "torch_npu"),
}

# handler(original, key, args, kwargs) -> result ; key is "Prefix.api", e.g. "Functional.relu"
Handler = Callable[[Callable, str, tuple, dict], Any]


@functools.cache
def load_api_names() -> dict[str, tuple[str, ...]]:
    text = importlib.resources.files("msprobe.pytorch.dump").joinpath("api_names.yaml").read_text()
    return {namespace: tuple(names) for namespace, names in yaml.safe_load(text).items()}


class ThreadState(threading.local):
    """``busy`` while this thread is inside a handled call or inside the tool."""

    busy = False


class Patch:
    """One attribute replaced on one object, and how to put it back."""

    __slots__ = ("attribute", "had_own", "original", "owner")

    def __init__(self, owner: Any, attribute: str, original: Any, had_own: bool):
        self.owner, self.attribute, self.original, self.had_own = owner, attribute, original, had_own

    def undo(self) -> None:
        if self.had_own:
            setattr(self.owner, self.attribute, self.original)
        else:
            try:
                delattr(self.owner, self.attribute)
            except AttributeError:
                setattr(self.owner, self.attribute, self.original)


def _resolve(root: Any, dotted: str) -> tuple[Any, str]:
    owner = root
    parts = dotted.split(".")
    for part in parts[:-1]:
        owner = getattr(owner, part)
    return owner, parts[-1]


def api_targets(selected: Callable[[str], bool] | None = None) -> list[tuple[Any, str, str]]:
    """(owner, attribute, key) for every listed API present in this torch (and torch_npu if imported)."""
    targets = []
    for namespace, names in load_api_names().items():
        prefix, module_name = NAMESPACES[namespace]
        if namespace == "torch_npu" and "torch_npu" not in sys.modules:
            continue  # never import torch_npu ourselves
        if namespace == "distributed" and not torch.distributed.is_available():
            continue
        root = torch.Tensor if namespace == "tensor" else importlib.import_module(module_name)
        for api in names:
            key = f"{prefix}.{api}"
            if selected is not None and not selected(key):
                continue
            try:
                owner, attribute = _resolve(root, api)
            except AttributeError:
                continue  # not in this torch version
            targets.append((owner, attribute, key))
    return targets


class ApiPatcher:
    def __init__(self, handler: Handler, selected: Callable[[str], bool] | None = None):
        self.handler = handler
        self.selected = selected
        self.state = ThreadState()
        self.patches: list[Patch] = []
        self._wrappers: dict[tuple[int, str], Callable] = {}

    def install(self) -> None:
        for owner, attribute, key in api_targets(self.selected):
            original = getattr(owner, attribute, None)
            if original is None or not callable(original) or getattr(original, "__msprobe_original__", None):
                continue
            had_own = attribute in getattr(owner, "__dict__", {})
            cache_key = (id(owner), attribute)
            wrapper = self._wrappers.get(cache_key)
            if wrapper is None or wrapper.__msprobe_original__ is not original:
                wrapper = self._wrappers[cache_key] = self._wrap(original, key)
            try:
                setattr(owner, attribute, wrapper)
            except (AttributeError, TypeError):
                continue  # read-only attribute
            self.patches.append(Patch(owner, attribute, original, had_own))

    def remove(self) -> None:
        for patch in reversed(self.patches):
            patch.undo()
        self.patches.clear()

    def _wrap(self, original: Callable, key: str) -> Callable:
        state = self.state
        handler = self.handler

        @functools.wraps(original)
        def wrapper(*args: Any, **kwargs: Any) -> Any:
            if state.busy:
                return original(*args, **kwargs)
            return handler(original, key, args, kwargs)

        wrapper.__msprobe_original__ = original
        return wrapper
