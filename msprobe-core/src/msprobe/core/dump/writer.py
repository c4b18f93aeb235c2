"""Writing one step/rank folder: dump.json, stack.json, construct.json.

Entries are kept in memory in call order and written as the reference
writes them (one-space indentation) when the step ends. Meanwhile each
entry is also appended to a journal next to dump.json, flushed to the OS
per entry, so a process killed mid-step leaves everything collected so far
readable (:func:`msprobe.core.dump.reader.read_dump` replays the journal).
Files are created 0o640, folders 0o750, and nothing is written through a
symlink.
"""

from __future__ import annotations

import json
import logging
import os
from pathlib import Path
from typing import Any

from msprobe.core.errors import DataFileError

logger = logging.getLogger(__name__)

JOURNAL_NAME = ".dump.json.journal"
FILE_MODE = 0o640
DIR_MODE = 0o750


def make_dir(path: Path) -> Path:
    """Create ``path`` (0o750) refusing symlinked components the tool would write through."""
    path = Path(path)
    if path.is_symlink():
        raise DataFileError(path, "is a symbolic link; refusing to write through it")
    path.mkdir(mode=DIR_MODE, parents=True, exist_ok=True)
    return path


def open_new_file(path: Path, mode: str = "w") -> Any:
    """Open for writing with 0o640, never following a symlink at ``path``."""
    flags = os.O_WRONLY | os.O_CREAT | os.O_TRUNC | getattr(os, "O_NOFOLLOW", 0)
    if "a" in mode:
        flags = (flags & ~os.O_TRUNC) | os.O_APPEND
    try:
        fd = os.open(path, flags, FILE_MODE)
    except OSError as exc:
        raise DataFileError(path, f"cannot be written ({exc.strerror})") from None
    return os.fdopen(fd, mode, encoding=None if "b" in mode else "utf-8")


def write_json_atomic(path: Path, data: Any, indent: int | None = 1) -> None:
    """Write to a temporary file and rename, so a reader never sees half a file."""
    temporary = path.with_name(f".{path.name}.tmp")
    with open_new_file(temporary) as handle:
        json.dump(data, handle, indent=indent, ensure_ascii=False)
    os.replace(temporary, path)


class DumpWriter:
    """The files of one ``step{N}/rank{R}`` folder."""

    def __init__(self, folder: Path, header: dict[str, Any], journal: bool = True):
        self.folder = make_dir(folder)
        self.header = header
        self.data: dict[str, Any] = {}
        self.stack: dict[str, Any] = {}
        self.construct: dict[str, str | None] = {}
        self._journal = open_new_file(self.folder / JOURNAL_NAME, "a") if journal else None
        self._closed = False
        self._log("header", "", header)

    def _log(self, kind: str, name: str, value: Any) -> None:
        if self._journal is None:
            return
        try:
            self._journal.write(json.dumps([kind, name, value], ensure_ascii=False) + "\n")
            self._journal.flush()
        except (OSError, TypeError, ValueError) as exc:  # a full disk must not stop training
            logger.warning("dump journal write failed for %s: %s", name, exc)

    def reserve(self, name: str) -> None:
        """Fix an entry's position now and fill it later (parameter gradients follow their forward)."""
        self.data.setdefault(name, None)

    def add(self, name: str, entry: dict[str, Any]) -> None:
        self.data[name] = entry
        self._log("data", name, entry)

    def add_stack(self, name: str, frames: Any) -> None:
        self.stack[name] = frames
        self._log("stack", name, frames)

    def set_parent(self, name: str, parent: str | None) -> None:
        self.construct[name] = parent
        self._log("construct", name, parent)

    def flush(self) -> None:
        """Write the three files with everything so far; collection may go on afterwards."""
        data = {name: entry for name, entry in self.data.items() if entry is not None}
        write_json_atomic(self.folder / "dump.json", {**self.header, "data": data})
        write_json_atomic(self.folder / "stack.json", self.stack)
        write_json_atomic(self.folder / "construct.json", self.construct)

    def close(self) -> None:
        """Write the three files and drop the journal."""
        if self._closed:
            return
        self._closed = True
        self.flush()
        if self._journal is not None:
            self._journal.close()
            (self.folder / JOURNAL_NAME).unlink(missing_ok=True)
