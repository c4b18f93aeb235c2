"""Lone surrogate escapes in JSON text.

JSON may spell ``\\ud800`` without its second half, and Python's json module reads it as a string that
holds no character: it cannot be written as UTF-8, so a name that carries one fails much later, in a CSV or
a file path, far from the file that held it. Readers of outside JSON call this first and refuse such text
with the byte where it is.
"""

from __future__ import annotations

import re

_ESCAPE = re.compile(rb"\\u[dD][89a-fA-F][0-9a-fA-F]{2}")
_BACKSLASH = 0x5C


def first_lone_surrogate(text: bytes) -> int | None:
    """Byte offset of the first ``\\uD800``-``\\uDFFF`` escape that is not half of a pair, else None."""
    if b"\\u" not in text:
        return None
    paired_low_at = -1
    for match in _ESCAPE.finditer(text):
        start = match.start()
        slashes = 0
        while start - slashes > 0 and text[start - slashes - 1] == _BACKSLASH:
            slashes += 1
        if slashes % 2:  # "\\ud800": an escaped backslash, then plain letters
            continue
        if start == paired_low_at:
            continue
        if int(match.group()[2:], 16) >= 0xDC00:
            return start  # a second half with no first
        follower = _ESCAPE.match(text, match.end())
        if follower is None or int(follower.group()[2:], 16) < 0xDC00:
            return start  # a first half with no second
        paired_low_at = match.end()
    return None


def lone_surrogate_message(text: bytes, base: int = 0) -> str | None:
    """The refusal for text holding a lone surrogate, naming its byte; None for text without one."""
    at = first_lone_surrogate(text)
    if at is None:
        return None
    escape = text[at : at + 6].decode("ascii")
    return f"at byte {base + at}: {escape} is half of a UTF-16 pair, which is no character"
