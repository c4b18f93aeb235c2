"""Lone surrogate escapes are found wherever JSON text holds one, and only there (cases written by hand)."""

import json

import pytest

from msprobe.core.dump.surrogates import first_lone_surrogate


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        (b'{"a": "plain"}', None),
        (b'{"a": "\\u00e9 and \\u4e2d"}', None),  # escapes of characters outside the surrogate range
        (b'{"a": "\\ud83d\\ude00"}', None),  # a pair: one character (an emoji)
        (b'{"a": "\\uD83D\\uDE00"}', None),  # the same in capitals
        (b'{"a": "\\ud800"}', 7),
        (b'{"a": "\\udc00"}', 7),  # a second half alone
        (b'{"a": "x\\ud83d\\u0041"}', 8),  # a first half, then no second half
        (b'{"a": "\\ude00\\ud83d"}', 7),  # halves in the wrong order
        (b'{"a": "\\\\ud800"}', None),  # an escaped backslash, then the letters ud800
        (b'{"a": "\\\\\\ud800"}', 9),  # an escaped backslash, then a lone escape
        (b'{"a": "\\ud83d\\ude00\\udc00"}', 19),  # a pair, then a second half alone
    ],
)
def test_lone_surrogates(text, expected):
    assert first_lone_surrogate(text) == expected
    loaded = json.loads(text)["a"]  # Python's json reads them all; only the lone ones cannot be written
    try:
        loaded.encode("utf-8")
        writable = True
    except UnicodeEncodeError:
        writable = False
    assert writable == (expected is None)
