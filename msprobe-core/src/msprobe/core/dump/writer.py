"""Writing one step/rank folder: dump.json, stack.json, construct.json.

Each entry is encoded to JSON once, when it arrives: that text is appended
to a journal next to dump.json (in the OS's hands as soon as it is written,
so a process killed mid-step leaves everything collected so far readable,
see :func:`msprobe.core.dump.reader.read_dump`) and reused when dump.json is
written at the end of the step, one entry per line. The reference indents
every value on its own line; any JSON reader reads both, and encoding once
(with orjson) is what keeps the dump cheap.
Files are created 0o640, folders 0o750, and nothing is written through a
symlink.
"""

from __future__ import annotations

import atexit
import json
import logging
import mmap
import os
import threading
from pathlib import Path
from typing import Any

from msprobe.core.dump.numbers import NonFinite
from msprobe.core.dump.pending_values import WaitingText
from msprobe.core.errors import DataFileError
from msprobe.core.files import make_dir, open_descriptor, open_new_file, write_new_file
from msprobe.core.switches import built_extension, switched_off

try:  # much faster than json for the dump's entries; the standard encoder stands in without it
    import orjson
except ImportError:  # pragma: no cover - a dependency of msprobe-core
    orjson = None

try:  # DumpWriter.add_journaled's usual case in C, for msprobe-torch's per-call path (see journal_c_api)
    from msprobe.core.dump import _journal as _c_journal
except ImportError:  # built without a C compiler: that path calls add_journaled instead
    _c_journal = None

logger = logging.getLogger(__name__)

# The switch for the C journal write (tests turn it off; so does MSPROBE_NO_C_JOURNAL=1).
C_JOURNAL_VERSION = 1  # _journal.c's INTERFACE_VERSION: the layout of the JournalAPI this package's callers declare
_c_journal = built_extension(_c_journal, C_JOURNAL_VERSION, "msprobe.core.dump._journal")
C_JOURNAL_AVAILABLE = _c_journal is not None and not switched_off("MSPROBE_NO_C_JOURNAL")


def journal_c_api() -> Any:
    """The C-level ``DumpWriter.add_journaled`` (a capsule named ``msprobe.core.dump._journal._C_API``) for another
    extension to call per entry, or None where it is not built, switched off, or of another version.

    It does the usual case (the step's journal open and sound) and answers 0 for the rest, which the caller then
    hands to ``add_journaled``; so no other package reads the writer's private state."""
    if not C_JOURNAL_AVAILABLE or _c_journal is None or _c_journal.INTERFACE_VERSION != C_JOURNAL_VERSION:
        return None
    return _c_journal._C_API


JOURNAL_NAME = ".dump.json.journal"
NO_PARENT = object()  # DumpWriter.add: no construct.json record (None is one: a root)


class EncodedJSON(str):
    """Text that is already JSON (e.g. a stack shared by many entries): written as is."""


class RawJSON:
    """A value inside an entry that is JSON text already (a backend's cached tensor summary): embedded as it is."""

    __slots__ = ("text",)

    def __init__(self, text: str):
        self.text = text

    def value(self) -> Any:
        """The text read back into Python values (for a caller that looks inside an entry)."""
        return json.loads(self.text)


def for_orjson(value: Any) -> Any:
    """orjson's ``default``: text already encoded is embedded; values measured asynchronously are read back now."""
    if isinstance(value, RawJSON):
        return orjson.Fragment(value.text)  # in orjson since 3.9, the version msprobe-core requires
    if isinstance(value, NonFinite):
        return orjson.Fragment(value.json_token)
    return _resolve(value)


def _for_json(value: Any) -> Any:
    """The standard encoder's ``default``, which cannot embed text: it is read instead."""
    if isinstance(value, RawJSON):
        return value.value()
    return _resolve(value)


def _resolve(value: Any) -> Any:
    resolve = getattr(value, "resolve", None)
    if resolve is None:
        raise TypeError(f"{type(value).__name__} is not JSON serializable")
    return resolve()


def encode_json(value: Any) -> str:
    """An entry's value as JSON text: orjson where it can (values measured late are read back, ``RawJSON``
    embedded), the standard encoder for what orjson refuses (an integer beyond 64 bits)."""
    if isinstance(value, EncodedJSON):
        return value
    if type(value) is RawJSON:  # a whole value measured already (a DTensor's shard): its text is the answer
        return value.text
    if orjson is not None:
        try:
            return orjson.dumps(value, default=for_orjson).decode()
        except TypeError:  # e.g. an integer beyond 64 bits: the standard encoder takes any size
            pass
    return json.dumps(value, ensure_ascii=False, default=_for_json)


def _final_text(value: Any) -> str | None:
    """A deferred entry's text, its values read now; None for an entry that is text already (or reserved)."""
    if isinstance(value, dict):
        return encode_json(value)
    if isinstance(value, WaitingText):
        return value.filled(_placeholder_text)
    return None


def _placeholder_text(value: Any) -> str:
    """A token's value as JSON text: its own ``json_text()`` where it has one (made once for all its entries)."""
    text = getattr(value, "json_text", None)
    return text() if text is not None else encode_json(value)


def _write_object(
    path: Path, header: dict[str, Any], entries: dict[str, str], key: str | None, names: dict[str, str]
) -> None:
    """Write ``{header..., key: {name: entry, ...}}`` (or just the entries) from pre-encoded texts.

    ``names`` holds the entries' names already encoded. The file's text is
    assembled in one join and written at once: a W step's dump.json and
    stack.json are close to a megabyte, and per-entry writes cost twice as long.
    """
    indent = "  " if key is not None else " "
    pieces = ["{\n"]
    pieces.extend(f" {encode_json(name)}: {encode_json(value)},\n" for name, value in header.items())
    if key is not None:
        pieces.append(f" {encode_json(key)}: {{")
    separator = f"\n{indent}"
    for name, text in entries.items():
        pieces += (separator, names.get(name) or encode_json(name), ": ", text)
        separator = f",\n{indent}"
    if key is not None:
        pieces.append("\n }" if entries else "}")
    pieces.append("\n}\n")
    text = "".join(pieces).encode()
    write_new_file(path, lambda handle: handle.write(text))  # a failed write (full disk) leaves no temporary


class _MappedJournal:
    """An append-only file written through a shared memory map.

    Bytes copied into a shared mapping belong to the OS's page cache at
    once, so they survive the process being killed, like a ``write`` call,
    at a fraction of a system call's cost per entry. The file's blocks are
    reserved before they are mapped (a full disk is then an ``OSError`` here,
    never a fault inside training); until :meth:`close` trims it, the file
    ends in zero bytes, which the journal's reader stops at.
    """

    def __init__(self, path: Path, size: int = 1 << 20):
        self.path = path
        self._fd = open_descriptor(path, os.O_RDWR | os.O_TRUNC)
        self._position = 0
        self._map: mmap.mmap | None = None
        try:
            os.posix_fallocate(self._fd, 0, size)
            self._map = mmap.mmap(self._fd, size)
        except BaseException:
            os.close(self._fd)
            raise
        self._size = size

    def write(self, data: bytes) -> None:
        """The lines go to the mapping at ``_position``; ``_journal.c``'s ``write_mapped`` does the same itself
        while they fit (tests check that both leave the same bytes)."""
        start = self._position
        end = start + len(data)
        if end > self._size:  # grow: reserve the blocks first, then map them
            size = max(2 * self._size, end)
            os.posix_fallocate(self._fd, self._size, size - self._size)
            self._map.resize(size)
            self._size = size
        self._map[start:end] = data
        self._position = end

    def close(self) -> None:
        """Trim the reserved tail and let go of the file."""
        self._release(trim=True)

    def _release(self, trim: bool) -> None:
        if self._map is not None:
            self._map.close()
            self._map = None
            if trim:
                os.ftruncate(self._fd, self._position)
            os.close(self._fd)

    # -- reuse from one step to the next -----------------------------------------------------
    @property
    def reserved(self) -> int:
        return self._size

    def retire(self, spare_path: Path) -> None:
        """Park the file under ``spare_path``, emptied, keeping its pages mapped for the next step.

        A page written for the first time costs a page fault, and closing and
        unlinking a file of written pages costs more: reusing the same pages
        saves both for every megabyte of entries.
        Renamed before it is emptied, so the finished step's folder never holds
        a journal cut short.
        """
        os.rename(self.path, spare_path)
        self.path = spare_path
        self._map[: self._position] = _zeros(self._position)
        self._position = 0

    def move_to(self, path: Path) -> None:
        os.rename(self.path, path)  # replaces a stale journal there; never follows a symlink at ``path``
        self.path = path

    def discard(self, unlink: bool = True) -> None:
        self._release(trim=False)
        if unlink:
            self.path.unlink(missing_ok=True)


_ZEROS = bytearray()


def _zeros(size: int) -> memoryview:
    global _ZEROS
    if len(_ZEROS) < size:
        _ZEROS = bytearray(max(size, 2 * len(_ZEROS)))
    return memoryview(_ZEROS)[:size]


class _SpareJournal:
    """At most one emptied journal per process, waiting for the next step's folder."""

    LARGEST = 64 << 20  # a bigger journal is closed as before: its pages are not worth holding

    def __init__(self) -> None:
        self._journal: _MappedJournal | None = None
        self._lock = threading.Lock()
        atexit.register(self.drop)
        if hasattr(os, "register_at_fork"):
            os.register_at_fork(after_in_child=self._forget)

    def take(self, path: Path) -> _MappedJournal | None:
        with self._lock:
            journal, self._journal = self._journal, None
        if journal is None:
            return None
        try:
            journal.move_to(path)
        except OSError:  # e.g. another file system: start afresh
            journal.discard()
            return None
        return journal

    def keep(self, journal: Any, finished_path: Path) -> bool:
        """True when ``journal`` is parked for reuse; otherwise the caller closes it as usual."""
        if not isinstance(journal, _MappedJournal) or journal.reserved > self.LARGEST:
            return False
        try:
            journal.retire(finished_path.with_name(f".msprobe-spare-journal-{os.getpid()}"))
        except OSError:
            return False
        with self._lock:
            previous, self._journal = self._journal, journal
        if previous is not None:
            previous.discard()
        return True

    def drop(self) -> None:
        with self._lock:
            journal, self._journal = self._journal, None
        if journal is not None:
            journal.discard()

    def _forget(self) -> None:
        """A forked child must not reuse (or delete) the parent's file."""
        journal, self._journal = self._journal, None
        self._lock = threading.Lock()
        if journal is not None:
            journal.discard(unlink=False)


_SPARE_JOURNAL = _SpareJournal()


def _open_journal(path: Path) -> Any:
    """The mapped journal where the system offers it, else an unbuffered file (one system call per entry)."""
    spare = _SPARE_JOURNAL.take(path)
    if spare is not None:
        return spare
    if hasattr(os, "posix_fallocate"):
        try:
            return _MappedJournal(path)
        except (OSError, ValueError) as exc:  # e.g. a file system without fallocate or memory maps
            logger.debug("dump journal: no memory map (%s), writing through the file", exc)
            path.unlink(missing_ok=True)
    return open_new_file(path, "ab", buffering=0)


def _journal_line(kind: str, encoded_name: str, text: str) -> str:
    """One journal record, ``[kind, name, value]`` on a line of its own (see the reader's replay)."""
    return f'["{kind}", {encoded_name}, {text}]\n'


class DumpWriter:
    """The files of one ``step{N}/rank{R}`` folder."""

    def __init__(
        self,
        folder: Path,
        header: dict[str, Any],
        journal: bool = True,
        file_name: str = "dump.json",
        extra_info: bool = True,
        create: bool = True,
    ):
        self.folder = make_dir(folder) if create else Path(folder)  # not created: the caller makes it later
        self.header = header
        self.file_name = file_name
        self.extra_info = extra_info  # False (26.x's extra_info): no stack.json and construct.json
        self.data: dict[str, Any] = {}
        self.stack: dict[str, str] = {}
        self.construct: dict[str, str] = {}
        # each entry reaches the OS at once, so a killed process keeps all of them;
        # created with the first entry (a step that records nothing costs no file)
        self._journal: Any = None
        self._journal_header = _journal_line("header", '""', encode_json(header)) if journal else None
        self._journal_failed = False
        self._names: dict[str, str] = {}  # entry name -> its JSON text, encoded once for the journal and the files
        self._unsettled: list[str] = []  # deferred entries not journaled yet
        self._closed = False
        self._dirty = True

    def _encoded(self, name: str) -> str:
        encoded = self._names.get(name)
        if encoded is None:
            encoded = self._names[name] = encode_json(name)
        return encoded

    def _log(self, kind: str, name: str, text: str) -> None:
        self._write_lines(_journal_line(kind, self._encoded(name), text))

    def _write_lines(self, lines: str) -> None:
        """One write per call: the OS has it even if the process is killed right after."""
        self._dirty = True
        if not lines or (self._journal is None and self._journal_header is None):
            return
        try:
            if self._journal is None:
                self._journal = _open_journal(self.folder / JOURNAL_NAME)
                lines, self._journal_header = self._journal_header + lines, None
            self._journal.write(lines.encode())
        except (
            OSError,
            DataFileError,
        ) as exc:  # a full disk or a journal that cannot be created must not stop training
            if self._journal is None:
                self._journal_header = None  # no journal for this step: stop trying
            if not self._journal_failed:
                self._journal_failed = True
                logger.warning("dump journal write failed (reported once): %s", exc)

    def reserve(self, name: str) -> None:
        """Fix an entry's position now and fill it later (parameter gradients follow their forward)."""
        self.data.setdefault(name, None)

    def add(
        self, name: str, entry: dict[str, Any], deferred: bool = False, stack: Any = None, parent: Any = NO_PARENT
    ) -> None:
        """Store an entry with its stack and parent, if given, journaled in one write.

        ``deferred`` entries (async dump) are encoded at the end of the step.
        """
        if not deferred:
            self.add_encoded(name, encode_json(entry), stack, parent)
            return
        self.data[name] = entry
        self._unsettled.append(name)
        self.add_encoded(name, None, stack, parent)

    def add_encoded(self, name: str, text: str | None, stack: Any = None, parent: Any = NO_PARENT) -> None:
        """``add`` for an entry whose JSON text is made already (None: its value comes later, see ``settle``)."""
        stack_text = None if stack is None else encode_json(stack)
        parent_text = None
        if parent is not NO_PARENT:
            parent_text = self._encoded(parent) if isinstance(parent, str) else encode_json(parent)
        self.add_journaled(name, self._encoded(name), text, stack_text, parent_text)

    def add_journaled(
        self, name: str, name_text: str, text: str | None, stack_text: str | None, parent_text: str | None
    ) -> None:
        """Store an entry, its stack and its parent (each None where there is none), all JSON text already, and
        journal them in one write: the path of every dumped call. ``_journal.c`` does the same in C for the torch
        backend's per-call path (see :func:`journal_c_api`) and calls this for every case it leaves."""
        self._names[name] = name_text
        lines = ""
        if text is not None:
            self.data[name] = text
            lines = _journal_line("data", name_text, text)
        if stack_text is not None and self.extra_info:
            self.stack[name] = stack_text
            lines += _journal_line("stack", name_text, stack_text)
        if parent_text is not None and self.extra_info:
            self.construct[name] = parent_text
            lines += _journal_line("construct", name_text, parent_text)
        self._write_lines(lines)

    def add_waiting(
        self, name: str, name_text: str, text: str, stack_text: str | None, parent_text: str | None
    ) -> None:
        """``add_journaled`` for an entry whose text holds tokens for values still on a device (see
        msprobe.core.dump.pending_values): its stack and parent are journaled now, its data once the values
        have come."""
        self.add_journaled(name, name_text, None, stack_text, parent_text)
        self.data[name] = WaitingText(text)
        self._unsettled.append(name)

    def settle(self) -> None:
        """The deferred entries added so far hold their final values: journal them, so a crash keeps them."""
        unsettled, self._unsettled = self._unsettled, []
        for name in unsettled:
            text = _final_text(self.data.get(name))
            if text is not None:
                self.data[name] = text
                self._log("data", name, text)

    def set_parent(self, name: str, parent: str | None) -> None:
        if not self.extra_info:
            return
        text = self.construct[name] = encode_json(parent)
        self._log("construct", name, text)

    def flush(self) -> None:
        """Write the three files with everything so far; collection may go on afterwards."""
        if not self._dirty:
            return
        self._unsettled.clear()
        for name, value in list(self.data.items()):  # filling may read a batch back, which settles entries
            text = _final_text(value)
            if text is not None:
                self.data[name] = text
                self._log("data", name, text)
        data = {name: text for name, text in self.data.items() if text is not None}
        _write_object(self.folder / self.file_name, self.header, data, "data", self._names)
        if self.file_name == "dump.json" and self.extra_info:
            _write_object(self.folder / "stack.json", {}, self.stack, None, self._names)
            _write_object(self.folder / "construct.json", {}, self.construct, None, self._names)
        self._dirty = False

    def close(self) -> None:
        """Write the three files and drop the journal."""
        if self._closed:
            return
        self._closed = True
        self.flush()
        journal, self._journal = self._journal, None
        if journal is not None and not _SPARE_JOURNAL.keep(journal, self.folder / JOURNAL_NAME):
            journal.close()
            (self.folder / JOURNAL_NAME).unlink(missing_ok=True)
