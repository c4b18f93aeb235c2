"""Reading a large dump.json a block of entries at a time.

``json.load`` of a million-entry dump.json builds gigabytes of Python
objects before the first entry can be used. Here the file is read in
blocks; the C scanner (``_jsonscan.c``) finds where each whole entry of
``data`` ends, and orjson parses a run of whole entries at once (Python's
json module takes what orjson refuses, NaN and Infinity, and the blocks
holding integers too long for orjson to keep exact).
Memory then holds one block, whatever the size of the file.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import orjson

from msprobe.core.dump.surrogates import lone_surrogate_message
from msprobe.core.errors import DataFileError
from msprobe.core.switches import built_extension

try:
    from msprobe.core.dump import _jsonscan
except ImportError:  # built without a C compiler: callers read the whole file instead
    _jsonscan = None
_jsonscan = built_extension(_jsonscan, 1, "msprobe.core.dump._jsonscan")

logger = logging.getLogger(__name__)

BLOCK_BYTES = 8 << 20
MAX_ENTRY_BYTES = 1 << 30  # one entry this large is no dump entry: stop rather than fill the memory
_SPACE = b" \t\r\n"
# a run of 19 digits may be an integer orjson would read as a float (it keeps 64 bits): such a block goes to
# json, which keeps it exact. Found by mapping digits to "D" (bytes.translate runs at memory speed).
_DIGITS_AS_D = bytes(0x44 if 0x30 <= byte <= 0x39 else 0x20 for byte in range(256))
_LONG_DIGIT_RUN = b"D" * 19


# the text; the first byte of a run of entries, the byte after them; the commas between them
Parse = Callable[[bytes, int, int, list[int]], Any]


def available() -> bool:
    """Whether dump.json files can be streamed here (the scanner was compiled)."""
    return _jsonscan is not None


class DumpStream:
    """A dump.json's header fields and its ``data`` entries, a block of whole entries at a time.

    ``header`` holds the top-level fields other than ``data``; those written before ``data`` (as both tools
    write them) are there when the first block comes, the rest once the blocks are done.
    """

    def __init__(self, path: Path, block_bytes: int | None = None):
        if _jsonscan is None:
            raise RuntimeError("the JSON scanner of msprobe-core was not compiled")
        self.path = Path(path)
        self.header: dict[str, Any] = {}
        self.block_bytes = block_bytes or BLOCK_BYTES
        self._data: bytes = b""
        self._base = 0  # file offset of self._data[0]
        self._handle: Any = None
        self._eof = False
        self._seen_data = False
        self._part: tuple[int, int] | None = None
        self._parse: Parse | None = None
        self._stopped = False
        self.parsed_bytes = 0  # of the blocks parsed so far: for a progress bar

    def blocks(self, part: tuple[int, int] | None = None, parse: Parse | None = None) -> Iterator[Any]:
        """Blocks of whole entries, in file order. ``part`` (first byte, end byte): only the blocks that begin
        in that range are parsed (two processes can share a file this way); reading stops past its end.
        ``parse(text, start, stop, commas)`` makes a block of the members in text[start:stop] (the entries
        between the braces of ``data``, without the comma after the last; ``commas`` are those between them);
        by default a dict of them, ``members``."""
        self._part = part
        self._parse = parse
        try:
            with open(self.path, "rb") as self._handle:
                yield from self._document()
        except FileNotFoundError:
            raise DataFileError(self.path, "dump.json not found") from None
        except IsADirectoryError:
            raise DataFileError(self.path, "cannot be read (it is a folder)") from None
        except OSError as exc:
            raise DataFileError(self.path, f"cannot be read ({exc.strerror or exc})") from None
        finally:
            self._handle, self._data = None, b""

    # the document: { "key": value, ..., "data": { entries }, ... }
    def _document(self) -> Iterator[dict[str, Any]]:
        at = self._skip_space(0)
        if self._byte(at) != b"{":
            raise self._invalid(at, "not a dump.json: expected an object with a 'data' object")
        at, first = at + 1, True
        while True:
            at = self._skip_space(at)
            if self._byte(at) == b"}":
                self._expect_end(at + 1)
                break
            if not first:
                if self._byte(at) != b",":
                    raise self._invalid(at, "expected ',' or '}'")
                at = self._skip_space(at + 1)
            first = False
            at, key = self._value(at)
            at = self._skip_space(at)
            if not isinstance(key, str) or self._byte(at) != b":":
                raise self._invalid(at, "expected a field name and ':'")
            at = self._skip_space(at + 1)
            if key == "data" and self._byte(at) == b"{":
                if self._seen_data:
                    raise self._invalid(at, "'data' appears twice")
                self._seen_data = True
                at = yield from self._entries(at + 1)
                if self._stopped:
                    return
            else:
                at, self.header[key] = self._value(at)
        if not self._seen_data:
            raise DataFileError(self.path, "not a dump.json: expected an object with a 'data' object")

    def _entries(self, at: int) -> Iterator[dict[str, Any]]:
        """The members of ``data`` in blocks; returns the position after its closing brace."""
        while True:
            ends, close = self._scan(at)
            last = close if close >= 0 else (ends[-1] if ends else -1)
            if last >= 0 and self._part is not None and not self._part[0] <= self._base + at < self._part[1]:
                if self._base + at >= self._part[1]:
                    self._stopped = True
                    return at
                if close >= 0:  # a block before the part: passed over unparsed
                    return close + 1
                at = last + 1
                continue
            if last >= 0:
                if self._parse is None:
                    block = self.members(at, last)
                else:
                    block = self._parse(self._data, at, last, [end for end in ends if end < last])
                self.parsed_bytes += last - at
                yield block
                if close >= 0:
                    return close + 1
                at = last + 1
                continue
            at = self._more(at)

    def members(self, start: int, stop: int) -> dict[str, Any]:
        """The entries in bytes [start, stop) of the text read now (while a ``parse`` given to ``blocks``
        runs), as a dict; each must be an object."""
        block = self._loads(b"{" + self._data[start:stop] + b"}", start, added=1)
        if not isinstance(block, dict):
            raise self._invalid(start, "'data' is not an object")
        for name, entry in block.items():
            if not isinstance(entry, dict):
                raise DataFileError(self.path, f"entry '{name}' is not an object")
        return block

    def _scan(self, at: int) -> tuple[list[int], int]:
        try:
            return _jsonscan.member_ends(self._data, at)
        except ValueError as exc:
            position = int(str(exc).rsplit(" ", 1)[-1])
            raise self._invalid(position, "invalid JSON") from None

    def _value(self, at: int) -> tuple[int, Any]:
        """A (small) value: a field name or a header field."""
        while True:
            try:
                end = _jsonscan.value_end(self._data, at)
            except ValueError:
                raise self._invalid(at, "invalid JSON") from None
            if end >= 0:
                return end, self._loads(self._data[at:end], at)
            at = self._more(at)

    def _loads(self, text: bytes, at: int, added: int = 0) -> Any:
        """``text`` from byte ``at`` of the buffer, with ``added`` bytes put in front of it."""
        if _LONG_DIGIT_RUN not in text.translate(_DIGITS_AS_D):
            try:
                return orjson.loads(text)
            except orjson.JSONDecodeError:
                pass
        lone = lone_surrogate_message(text, self._base + at - added)  # orjson refuses these; json would take them
        if lone is not None:
            raise DataFileError(self.path, lone)
        try:
            return json.loads(text.decode("utf-8"))
        except UnicodeDecodeError:
            raise DataFileError(self.path, "is not UTF-8 text") from None
        except json.JSONDecodeError as exc:
            raise self._invalid(at + max(exc.pos - 1, 0), exc.msg) from None
        except RecursionError:
            raise DataFileError(self.path, "dump.json is nested too deeply") from None

    # the buffer
    def _more(self, keep: int, required: bool = True) -> int:
        """Drop what lies before ``keep`` and read another block; returns ``keep``'s new position. At the end of
        the file: an error when more was ``required`` (a value is cut short), else ``keep`` as it was."""
        if len(self._data) - keep > MAX_ENTRY_BYTES:
            raise DataFileError(self.path, f"an entry at byte {self._base + keep} is larger than 1 GiB")
        chunk = b"" if self._eof else self._handle.read(self.block_bytes)
        if not chunk:
            self._eof = True
            if required:
                raise self._invalid(len(self._data), "the file ends inside a value")
            return keep
        self._base += keep
        self._data = self._data[keep:] + chunk
        return 0

    def _byte(self, at: int) -> bytes:
        """The byte at ``at``, after _skip_space has made it present (b"" at the end of the file)."""
        return self._data[at : at + 1]

    def _skip_space(self, at: int) -> int:
        while True:
            while at < len(self._data) and self._data[at] in _SPACE:
                at += 1
            if at < len(self._data) or self._eof:
                return at
            at = self._more(at, required=False)

    def _expect_end(self, at: int) -> None:
        at = self._skip_space(at)
        if at < len(self._data):
            raise self._invalid(at, "extra data after the object")

    def _invalid(self, at: int, what: str) -> DataFileError:
        return DataFileError(self.path, f"invalid JSON at byte {self._base + at}: {what}")
