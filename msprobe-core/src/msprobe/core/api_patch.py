"""Replacing a framework's APIs with wrappers, and putting them back.

A backend lists the ``(owner, attribute, key)`` targets; the patcher puts a
wrapper on each that passes the call to a handler unless the calling thread
is already inside a handled call, so only the outermost framework call is
seen. Wrappers are built once and reused on every ``install()``;
``remove()`` restores every original. Nothing here knows a framework.
"""

from __future__ import annotations

import functools
import threading
from collections.abc import Callable, Iterable
from typing import Any

# handler(original, key, args, kwargs) -> result ; key is "Prefix.api", e.g. "Functional.relu"
Handler = Callable[[Callable, str, tuple, dict], Any]
Targets = Callable[[], Iterable[tuple[Any, str, str]]]


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


def resolve_attribute(root: Any, dotted: str) -> tuple[Any, str]:
    """(owner, attribute) of 'linalg.norm' under root; AttributeError when missing."""
    owner = root
    parts = dotted.split(".")
    for part in parts[:-1]:
        owner = getattr(owner, part)
    getattr(owner, parts[-1])
    return owner, parts[-1]


class ApiPatcher:
    def __init__(self, handler: Handler, targets: Targets):
        self.handler = handler
        self.targets = targets
        self.state = ThreadState()
        self.patches: list[Patch] = []
        self._plan: list[tuple[Patch, Callable]] | None = None  # built on the first install, reused after

    def _build_plan(self) -> list[tuple[Patch, Callable]]:
        plan = []
        for owner, attribute, key in self.targets():
            original = getattr(owner, attribute, None)
            if original is None or not callable(original) or getattr(original, "__msprobe_original__", None):
                continue
            had_own = attribute in getattr(owner, "__dict__", {})
            plan.append((Patch(owner, attribute, original, had_own), self._wrap(original, key)))
        return plan

    def install(self) -> None:
        if self._plan is None:
            self._plan = self._build_plan()
        for patch, wrapper in self._plan:
            if getattr(patch.owner, patch.attribute, None) is not patch.original:
                continue  # someone else replaced it since: leave theirs alone
            try:
                setattr(patch.owner, patch.attribute, wrapper)
            except (AttributeError, TypeError):
                continue  # read-only attribute
            self.patches.append(patch)

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
