"""Files, safely: what every writer of results and every reader of someone else's files goes through.

Reading: only regular files, each refusal one clear line naming the file. A FIFO given for a dump.json would
block the reader for good, and ``/dev/zero`` would be read until memory runs out; neither is a file a tool wrote.

Writing: files are created 0o640 and folders 0o750, nothing is written through a symbolic link, and a new file
appears whole or not at all (written under a private name, then renamed). The dump format, the compare's
tables, the graph and the store all write this way, so none of them depends on another for it.
"""

from __future__ import annotations

import contextlib
import io
import json
import os
import secrets
import stat
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, BinaryIO

from msprobe.core.errors import DataFileError


def regular_file(path: str | Path, what: str) -> Path:
    """``path``, when it names a regular file (through a symbolic link or not); else a ``DataFileError`` that
    says what ``what`` (dump.json, compare.json...) found there instead."""
    file = Path(path)
    try:
        mode = os.stat(file).st_mode
    except FileNotFoundError:
        raise DataFileError(file, f"{what} not found") from None
    except OSError as exc:
        raise DataFileError(file, f"{what} cannot be read ({exc.strerror})") from None
    if stat.S_ISDIR(mode):
        raise DataFileError(file, f"is a folder where a file ({what}) should be")
    if not stat.S_ISREG(mode):
        raise DataFileError(file, f"is not a regular file (a FIFO, a device...) where a file ({what}) should be")
    return file


def plain_yaml(text: str) -> Any:
    """YAML without anchors and aliases, safely loaded. No mapping or config msprobe reads needs them, and a
    kilobyte of aliases (a "billion laughs") expands into gigabytes once anything walks what it holds."""
    import yaml

    class NoAliases(yaml.SafeLoader):
        def compose_node(self, parent: Any, index: Any) -> Any:
            if self.check_event(yaml.AliasEvent):
                event = self.peek_event()
                raise yaml.composer.ComposerError(
                    None, None, "aliases (*name) are not allowed in msprobe's YAML files", event.start_mark
                )
            return super().compose_node(parent, index)

    return yaml.load(text, Loader=NoAliases)


FILE_MODE = 0o640
DIR_MODE = 0o750


def make_dir(path: Path, root: Path | None = None) -> Path:
    """Create ``path`` (0o750) refusing symlinked components the tool would write through: ``path`` itself, and
    with ``root`` every folder between root and path (a planted ``dump_path/step3`` link to elsewhere)."""
    path = Path(path)
    if root is not None:
        refuse_links_below(Path(root), path)
    if path.is_symlink():
        raise DataFileError(path, "is a symbolic link; refusing to write through it")
    try:
        missing = []  # from path up to the first folder there (a step's own folders; not every parent up to /)
        folder = path
        while not folder.exists() and folder != folder.parent:
            missing.append(folder)
            folder = folder.parent
        for folder in reversed(missing):  # each made 0o750: mkdir(parents=True) gives the parents 0o777 & ~umask
            folder.mkdir(mode=DIR_MODE, exist_ok=True)
        if not path.is_dir():
            raise FileExistsError(path)
    except FileExistsError:
        raise DataFileError(path, "cannot be created: a file of that name is in the way") from None
    except OSError as exc:
        raise DataFileError(path, f"cannot be created ({exc.strerror})") from None
    return path


def refuse_links_below(root: Path, path: Path) -> None:
    """No folder between ``root`` and ``path`` (both included, root excluded) may be a symbolic link."""
    for part in reversed(path.relative_to(root).parents):
        if part != Path(".") and (root / part).is_symlink():
            raise DataFileError(root / part, "is a symbolic link; refusing to write through it")
    if path.is_symlink():
        raise DataFileError(path, "is a symbolic link; refusing to write through it")


def open_descriptor(path: Path, flags: int) -> int:
    """``os.open`` with 0o640, never following a symlink at ``path``; failures name the file."""
    try:
        return os.open(path, flags | os.O_CREAT | getattr(os, "O_NOFOLLOW", 0), FILE_MODE)
    except OSError as exc:
        raise DataFileError(path, f"cannot be written ({exc.strerror})") from None


def open_new_file(
    path: Path, mode: str = "w", buffering: int = -1, encoding: str = "utf-8", newline: str | None = None
) -> Any:
    """Open for writing with 0o640, never following a symlink at ``path``."""
    flags = os.O_WRONLY | (os.O_APPEND if "a" in mode else os.O_TRUNC)
    fd = open_descriptor(path, flags)
    if "b" in mode:
        return os.fdopen(fd, mode, buffering=buffering)
    return os.fdopen(fd, mode, buffering=buffering, encoding=encoding, newline=newline)


def temporary_name(path: Path) -> Path:
    """A name beside ``path`` that nobody can guess, for the file :func:`create_private` makes."""
    return path.with_name(f".{path.name}.{secrets.token_hex(8)}.tmp")


def create_private(path: Path) -> tuple[int, Path]:
    """A file made new beside ``path``, under a name nobody can guess (``.{name}.{random}.tmp``): created with
    O_CREAT|O_EXCL|O_NOFOLLOW, so nothing planted there (a file, a link) is opened, and given 0o640 through its
    descriptor, not its path. Returns the descriptor, open for writing, and the name."""
    path = Path(path)
    flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_CLOEXEC", 0)
    for _ in range(16):
        temporary = temporary_name(path)
        try:
            fd = os.open(temporary, flags, 0o600)
        except FileExistsError:
            continue  # taken (by a planted file or link): another name
        except OSError as exc:
            raise DataFileError(path, f"cannot be written ({exc.strerror})") from None
        if hasattr(os, "fchmod"):
            os.fchmod(fd, FILE_MODE)
        return fd, temporary
    raise DataFileError(path.parent, "no temporary file could be made beside the result: every name was taken")


def writable(fd: int) -> BinaryIO:
    """The binary file object of a descriptor made for writing (one place a test can make the disk full)."""
    return os.fdopen(fd, "wb")


def open_private(path: Path, mode: str = "wb", encoding: str = "utf-8", newline: str | None = None) -> tuple[Any, Path]:
    """A file object (binary, or text for a ``mode`` without "b") on a private temporary beside ``path``
    (:func:`create_private`), and the temporary's name, for a caller that renames it later itself."""
    fd, temporary = create_private(Path(path))
    try:
        binary = writable(fd)
    except BaseException:
        os.close(fd)
        raise
    if "b" in mode:
        return binary, temporary
    return io.TextIOWrapper(binary, encoding=encoding, newline=newline), temporary


@contextlib.contextmanager
def new_file(path: Path, mode: str = "wb", encoding: str = "utf-8", newline: str | None = None) -> Iterator[Any]:
    """Write a new file at ``path`` (0o640) through the handle this yields (text for a ``mode`` without "b"):
    it goes to a private temporary (:func:`create_private`) renamed onto ``path`` when the block ends, which
    replaces a link planted at ``path`` instead of writing through it; a block that fails leaves nothing."""
    path = Path(path)
    make_dir(path.parent)
    handle, temporary = open_private(path, mode, encoding, newline)
    try:
        with handle:
            yield handle
        os.replace(temporary, path)
    except OSError as exc:  # a full disk, a file-size limit: said with the file's name, which the error lacks
        with contextlib.suppress(OSError):
            os.unlink(temporary)
        if exc.filename is not None or exc.strerror is None:
            raise
        # still an OSError, which the dump's callers catch to go on; now it names the file
        raise OSError(exc.errno, exc.strerror, str(path)) from None
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(temporary)
        raise


def write_new_file(path: Path, write: Callable[[BinaryIO], Any]) -> Path:
    """A new file at ``path``, written by ``write(handle)`` (see :func:`new_file`)."""
    with new_file(path) as handle:
        write(handle)
    return Path(path)


def write_new_text(path: Path, text: str) -> Path:
    """``text`` as a new UTF-8 file at ``path`` (see :func:`new_file`)."""
    data = text.encode("utf-8")
    return write_new_file(path, lambda handle: handle.write(data))


def _writev(fd: int, views: list[memoryview]) -> int:
    if hasattr(os, "writev"):
        return os.writev(fd, views)
    return os.write(fd, views[0])  # no writev (Windows): one part at a time


def write_parts(path: Path, parts: list[Any]) -> None:
    """All of ``parts`` (bytes-like, read in place) at ``path`` in one system call where it can; a write that
    fails (a full disk) leaves no truncated file behind."""
    views = [memoryview(part) for part in parts]
    fd = open_descriptor(path, os.O_WRONLY | os.O_TRUNC)
    try:
        while views:
            written = _writev(fd, views)
            while written and views:
                if written >= len(views[0]):
                    written -= len(views.pop(0))
                else:
                    views[0] = views[0][written:]
                    written = 0
    except BaseException:
        os.close(fd)
        with contextlib.suppress(OSError):
            os.unlink(path)
        raise
    os.close(fd)


def write_json_atomic(path: Path, data: Any, indent: int | None = 1) -> None:
    """Write to a temporary file and rename, so a reader never sees half a file (nor a leftover temporary)."""
    text = json.dumps(data, indent=indent, ensure_ascii=False).encode()
    write_new_file(Path(path), lambda handle: handle.write(text))
