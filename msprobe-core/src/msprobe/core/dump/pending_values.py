"""Entry texts written before all their values are known.

A backend's per-call path writes an entry's JSON text while the call is
made, but a tensor on a GPU or NPU has its statistics on the device until
the batch they wait in is read back. Each such value stands in the text as
a token, ``\\x01{number}\\x02``, and the entry waits in the writer as a
:class:`WaitingText` until the values have come: then every token is
replaced by its value's JSON text, and the entry is journaled as any other.

The two bytes cannot occur in JSON text otherwise (control characters are
escaped inside strings, and are not whitespace), so a token is never
confused with the entry's own text.
"""

from __future__ import annotations

import itertools
import re
from collections.abc import Callable
from typing import Any

TOKEN = re.compile("\x01([0-9]+)\x02")
MARK = "\x01"  # the first byte of every token: an entry holding none is final already


class Placeholders:
    """The values the tokens stand for, by number, until their entry is filled in.

    One table serves the whole process: a token is made where the value is
    encoded (the backend's encoder) and filled where the entry is settled (the
    writer), which do not otherwise share an object. Taking a number and
    storing or removing one key are single operations under the GIL, so
    threads that record at once do not need a lock here.
    """

    def __init__(self) -> None:
        self._values: dict[int, Any] = {}
        self._numbers = itertools.count()

    def token(self, value: Any) -> str:
        """The token for a value whose ``resolve()`` gives it later (reading its batch back if it must)."""
        number = next(self._numbers)
        self._values[number] = value
        return f"\x01{number}\x02"

    def fill(self, text: str, encode: Callable[[Any], str]) -> str:
        """``text`` with every token replaced by its value's JSON text (``encode``); each token is used once."""
        pieces = text.split(MARK)  # every piece after the first begins with a token's number and its end mark
        for index in range(1, len(pieces)):
            number, _, after = pieces[index].partition("\x02")
            pieces[index] = encode(self._values.pop(int(number))) + after
        return "".join(pieces)

    def drop(self, text: str) -> None:
        """Forget the values of ``text``'s tokens: its entry was replaced before it was filled in."""
        for found in TOKEN.finditer(text):
            self._values.pop(int(found[1]), None)

    def __len__(self) -> int:
        return len(self._values)


PLACEHOLDERS = Placeholders()


class WaitingText:
    """An entry's JSON text that still holds tokens (see the module's docstring).

    An entry rewritten before its values came (a module's ``parameters_grad``
    is, as each gradient arrives) lets go of this one; its tokens' values go
    with it, so the table holds only what some entry still waits for.
    """

    __slots__ = ("text",)

    def __init__(self, text: str):
        self.text: str | None = text

    def filled(self, encode: Callable[[Any], str]) -> str:
        text, self.text = self.text, None
        return PLACEHOLDERS.fill(text, encode)

    def __del__(self) -> None:
        if self.text is not None:
            PLACEHOLDERS.drop(self.text)
