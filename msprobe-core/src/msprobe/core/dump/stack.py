"""Call stacks for stack.json, without reading source files per call.

The formatted, JSON-encoded text is cached per call site: the frames'
(code object, last instruction) pairs, cheap to read where ``f_lineno``
scans a line table. Code objects are keyed by ``id`` (and kept alive by
the caches, so an id is never reused while cached): hashing a code object
hashes its bytecode and constants, too slow for every call.

What lies above a call's frame is numbered once per distinct stack, frame by
frame from the top: a frame's number stands for its (code, instruction) and
the number of its caller. The frames of the last stack walked are kept with
their numbers, and the next walk stops at the first of them it meets at the
same instruction: a frame that is still on the stack and has not moved on
has the same callers as before (a caller waits at its call while the callee
runs), so a model's forward, where every API call comes from another
module's frame deep in the same stack, walks a few frames instead of all of
them. Generator and coroutine frames are never trusted that way: another
caller may have resumed them. The kept frames are those of the stack being
recorded, let go of at the next walk or by ``forget``. Source lines come
from linecache, which reads each file once.

``stack_capture`` gives the walker in C (``_frames.c``) where it was built:
the same walk on the same state, without Python code per call.
"""

from __future__ import annotations

import inspect
import json
import linecache
import sys
from pathlib import Path
from typing import Any

from msprobe.core.dump.writer import EncodedJSON
from msprobe.core.switches import built_extension, switched_off

try:  # the walk in C; a Python before 3.11 or an install without a C compiler walks here
    from msprobe.core.dump import _frames
except ImportError:
    _frames = None
if switched_off("MSPROBE_NO_FAST_PATH"):  # the per-call work in C is off as a whole
    _frames = None
_frames = built_extension(_frames, 1, "msprobe.core.dump._frames", python=(3, 11))

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
        self._numbers: dict[tuple, int] = {}  # (id(code), instruction, number of the callers) -> a number
        # the last stack walked, outermost first: (frame, its instruction then, the number of it and its callers)
        self._chain: list[tuple[Any, int, int]] = []
        self._place: dict[int, int] = {}  # id(frame) -> its index in _chain

    def forget(self) -> None:
        """Let go of the frames kept (called when dumping stops, so their locals can be freed)."""
        self._chain.clear()
        self._place.clear()

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
        return self._cached((id(frame.f_code), frame.f_lasti, self._number_above(frame.f_back)), frame)

    def _number_above(self, frame: Any) -> int:
        """The number of the stack from ``frame`` up (-1 for none), walking only what the last walk did not see."""
        chain, place = self._chain, self._place
        walked = []
        kept, number = 0, -1
        while frame is not None:
            index = place.get(id(frame))
            if index is not None:
                held, instruction, held_number = chain[index]
                if held is frame and instruction == frame.f_lasti and not frame.f_code.co_flags & _RESUMABLE:
                    kept, number = index + 1, held_number
                    break
            walked.append(frame)
            frame = frame.f_back
        for held, _, _ in chain[kept:]:  # no longer on this stack, or moved on: let go of them
            place.pop(id(held), None)
        del chain[kept:]
        numbers = self._numbers
        for frame in reversed(walked):  # outermost first
            code, instruction = frame.f_code, frame.f_lasti
            if not self._tool(code):  # the tool's own frames add nothing (which also keeps the code object alive)
                number = numbers.setdefault((id(code), instruction, number), len(numbers))
            place[id(frame)] = len(chain)
            chain.append((frame, instruction, number))
        return number

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


def stack_capture(*tool_roots: str) -> Any:
    """A ``StackCapture``, or the C walker over one (called and forgotten alike)."""
    capture = StackCapture(*tool_roots)
    return _frames.Walker(capture) if _frames is not None else capture
