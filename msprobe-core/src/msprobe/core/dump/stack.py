"""Call stacks for stack.json, without reading source files per call.

Frames are walked (cheap); the formatted, JSON-encoded text is cached per
call site, and source lines come from linecache, which reads each file once.
"""

from __future__ import annotations

import json
import linecache
import sys
from pathlib import Path
from typing import Any

from msprobe.core.dump.writer import EncodedJSON

_CORE_ROOT = str(Path(__file__).resolve().parents[2])  # .../msprobe of msprobe-core


class StackCapture:
    """Captures the user's stack, leaving out frames of the tool (``tool_roots``)."""

    def __init__(self, *tool_roots: str):
        self.roots = (_CORE_ROOT, *tool_roots)
        self._cache: dict[tuple, EncodedJSON] = {}
        self._is_tool: dict[Any, bool] = {}  # code object -> whether it is the tool's own

    def __call__(self, skip: int = 1) -> EncodedJSON:
        # keyed by (code, last instruction) per frame: reading f_lasti is cheap, f_lineno scans a line table
        top = sys._getframe(skip)
        frame = top
        key: list[Any] = []
        is_tool = self._is_tool
        while frame is not None:
            code = frame.f_code
            tool = is_tool.get(code)
            if tool is None:
                tool = is_tool[code] = code.co_filename.startswith(self.roots)
            if not tool:
                key.append(code)
                key.append(frame.f_lasti)
            frame = frame.f_back
        cache_key = tuple(key)
        cached = self._cache.get(cache_key)
        if cached is None:
            cached = self._cache[cache_key] = self._format(top)
        return cached

    def _format(self, frame: Any) -> EncodedJSON:
        frames = []
        while frame is not None:
            code = frame.f_code
            if not self._is_tool[code]:
                line = frame.f_lineno
                frames.append(
                    f"File {code.co_filename}, line {line}, in {code.co_name}, \n "
                    f"{linecache.getline(code.co_filename, line).strip()}"
                )
            frame = frame.f_back
        return EncodedJSON(json.dumps(frames, ensure_ascii=False))
