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

    def reset(self) -> None:
        self._counts.clear()
        self._started.clear()
