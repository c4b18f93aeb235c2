"""Call stacks for stack.json, without reading source files per call.

The formatted, JSON-encoded text is cached per call site: the frames'
(code object, last instruction) pairs, cheap to read where ``f_lineno``
scans a line table. Code objects are keyed by ``id`` (and kept alive by
the caches, so an id is never reused while cached): hashing a code object
hashes its bytecode and constants, about a microsecond each time.
Consecutive calls from one running function (a forward method, an
optimizer's loop) share everything above it, so the part of the key above
the innermost user frame is remembered for that frame and not walked again
while it runs. Source lines come from
linecache, which reads each file once.
"""

from __future__ import annotations

import inspect
import json
import linecache
import sys
from pathlib import Path
from typing import Any

from msprobe.core.dump.writer import EncodedJSON

_CORE_ROOT = str(Path(__file__).resolve().parents[2])  # .../msprobe of msprobe-core
# a generator's or coroutine's frame is resumed by different callers: what lies above it may change while it lives
_RESUMABLE = inspect.CO_GENERATOR | inspect.CO_COROUTINE | inspect.CO_ASYNC_GENERATOR | inspect.CO_ITERABLE_COROUTINE


class StackCapture:
    """Captures the user's stack, leaving out frames of the tool (``tool_roots``)."""

    def __init__(self, *tool_roots: str):
        self.roots = (_CORE_ROOT, *tool_roots)
        self._cache: dict[tuple, EncodedJSON] = {}
        self._is_tool: dict[int, bool] = {}  # id(code object) -> whether it is the tool's own
        self._codes: list[Any] = []  # every code object keyed by id above, kept alive
        self._callers: dict[tuple, int] = {}  # the key of the frames above the innermost user frame -> a number
        self._last: tuple[Any, int] | None = None  # (innermost user frame, number of what is above it)

    def forget(self) -> None:
        """Let go of the last frame remembered (called when dumping stops, so its locals can be freed)."""
        self._last = None

    def _tool(self, code: Any) -> bool:
        tool = self._is_tool.get(id(code))
        if tool is None:
            self._codes.append(code)
            tool = self._is_tool[id(code)] = code.co_filename.startswith(self.roots)
        return tool

    def __call__(self, skip: int = 1) -> EncodedJSON:
        frame = sys._getframe(skip)
        is_tool = self._is_tool
        while frame is not None:  # the tool's own frames, skipped (the lookup inline: this runs per call)
            tool = is_tool.get(id(frame.f_code))
            if tool is None:
                tool = self._tool(frame.f_code)
            if not tool:
                break
            frame = frame.f_back
        if frame is None:
            return self._cached((), None)
        last = self._last
        if last is not None and last[0] is frame:  # still running: nothing above it has moved
            callers = last[1]
        else:
            callers = self._callers_number(frame.f_back)
            self._last = None if frame.f_code.co_flags & _RESUMABLE else (frame, callers)
        return self._cached((id(frame.f_code), frame.f_lasti, callers), frame)

    def _callers_number(self, frame: Any) -> int:
        key = []
        while frame is not None:
            code = frame.f_code
            if not self._tool(code):  # which also keeps the code object alive
                key.append(id(code))
                key.append(frame.f_lasti)
            frame = frame.f_back
        return self._callers.setdefault(tuple(key), len(self._callers))

    def _cached(self, key: tuple, frame: Any) -> EncodedJSON:
        cached = self._cache.get(key)
        if cached is None:
            cached = self._cache[key] = self._format(frame)
        return cached

    def _format(self, frame: Any) -> EncodedJSON:
        frames = []
        while frame is not None:
            code = frame.f_code
            if not self._tool(code):
                line = frame.f_lineno
                frames.append(
                    f"File {code.co_filename}, line {line}, in {code.co_name}, \n "
                    f"{linecache.getline(code.co_filename, line).strip()}"
                )
            frame = frame.f_back
        return EncodedJSON(json.dumps(frames, ensure_ascii=False))
