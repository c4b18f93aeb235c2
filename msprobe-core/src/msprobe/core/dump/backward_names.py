"""Names of backward entries, numbered as the reference numbers them.

An API's backward entry keeps its forward number (``Functional.relu.3.forward``
pairs with ``Functional.relu.3.backward``). A module's or cell's does not: the
reference takes the module's next backward number when the gradients of the
call's outputs arrive, so for a module called twice ``backward.0`` belongs to
the call whose backward ran first, usually the later forward call. Dumps of
either tool only compare entry for entry if both number the same way.
"""

from __future__ import annotations

from collections import defaultdict

_MODULE_PREFIXES = ("Module.", "Cell.")
_FORWARD = ".forward."


def forward_index_name(forward_name: str) -> str:
    """The backward name with the forward call's number: right for APIs, a first guess for modules."""
    if forward_name.startswith(_MODULE_PREFIXES):
        return forward_name.replace(_FORWARD, ".backward.")
    return forward_name[: -len("forward")] + "backward"


class BackwardNumbering:
    """Hands out module backward numbers in backward order, one step at a time."""

    def __init__(self) -> None:
        self._counts: dict[str, int] = defaultdict(int)
        self._started: dict[str, str] = {}  # forward name of a module call -> its backward name
        # PyTorch's construct.json follows the order the module backward hooks run in: a module's backward
        # opens when its output gradients arrive and closes when it is written; its parent is the backward
        # open at that moment, which is not always its forward parent's (a module that takes no positional
        # tensor opens and closes at once, so the calls inside it get the enclosing one).
        self._open: list[str] = []
        self._opened_under: dict[str, str | None] = {}

    def start(self, forward_name: str) -> str:
        """The backward name of a module call whose backward starts now (the same name if it already has one)."""
        name = self._started.get(forward_name)
        if name is None:
            label = forward_name.rsplit(_FORWARD, 1)[0]
            number = self._counts[label]
            self._counts[label] = number + 1
            name = self._started[forward_name] = f"{label}.backward.{number}"
        return name

    def parent(self, forward_name: str | None) -> str | None:
        """construct.json's parent for a backward entry made inside the call named ``forward_name``.

        A call whose backward has not started (its outputs got no gradient
        before this entry's) keeps the forward call's number.
        """
        if forward_name is None:
            return None
        return self._started.get(forward_name) or forward_index_name(forward_name)

    def open(self, forward_name: str) -> str:
        """A module call's backward starts: numbered, and the innermost open backward until it closes."""
        name = self.start(forward_name)
        if name not in self._opened_under:
            self._opened_under[name] = self._open[-1] if self._open else None
            self._open.append(name)
        return name

    def close(self, backward_name: str) -> None:
        """A module call's backward was written: it closes."""
        if backward_name in self._opened_under and backward_name in self._open:
            self._open.remove(backward_name)

    def opened_under(self, backward_name: str) -> str | None:
        """construct.json's parent of a module backward entry: what was open when it opened."""
        return self._opened_under.get(backward_name)

    def innermost(self) -> str | None:
        """construct.json's parent of an API backward entry made now."""
        return self._open[-1] if self._open else None

    def reset(self) -> None:
        self._counts.clear()
        self._started.clear()
        self._open.clear()
        self._opened_under.clear()
