"""Reading a dump folder written by this tool or by the reference tool.

Robust to what real dumps look like: a ``dump_data_dir`` that names the
folder the dump was written to rather than where it lies now, a process
killed before dump.json was written (the journal is replayed), and
malformed files (one clear error naming the file).
"""

from __future__ import annotations

import json
import logging
import os
import stat
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from msprobe.core.dump.surrogates import lone_surrogate_message
from msprobe.core.dump.writer import JOURNAL_NAME
from msprobe.core.errors import DataFileError
from msprobe.core.files import regular_file

logger = logging.getLogger(__name__)


@dataclass
class Dump:
    """One step/rank folder: header fields, entries in call order, stacks, hierarchy."""

    path: Path
    task: str
    level: str
    framework: str
    data: dict[str, Any]
    dump_data_dir: str | None = None
    stack: dict[str, Any] = field(default_factory=dict)
    construct: dict[str, Any] = field(default_factory=dict)
    recovered: bool = False
    arrays: dict[str, Any] = field(default_factory=dict)  # data_name -> tensor held in memory (online pre-check)
    parallel: dict[str, Any] | None = None  # a sharded run's layout (world, rank, data-parallel group)
    batch: dict[str, Any] | None = None  # serving: the forward's requests and tokens (see docs/serving.md)

    @classmethod
    def from_header(cls, path: Path, header: dict[str, Any], data: dict[str, Any], **fields: Any) -> Dump:
        """A dump of ``data`` with the header fields of a dump.json (or a journal), whatever their types."""
        return cls(
            path,
            str(header.get("task", "")),
            str(header.get("level", "")),
            str(header.get("framework", "")),
            data,
            header.get("dump_data_dir"),
            **fields,
            parallel=header.get("parallel") if isinstance(header.get("parallel"), dict) else None,
            batch=header.get("batch") if isinstance(header.get("batch"), dict) else None,
        )

    @property
    def folder(self) -> Path:
        return self.path.parent

    def tensor_dir(self) -> Path | None:
        """Where the tensor files are: next to dump.json first, then where dump_data_dir says."""
        local = self.folder / "dump_tensor_data"
        if local.is_dir():
            return local
        if self.dump_data_dir:
            recorded = Path(self.dump_data_dir)
            if not recorded.is_absolute():
                recorded = self.folder / recorded
            if recorded.is_dir():
                return recorded
        return None

    def tensor_file(self, data_name: str | None, entry: str = "") -> Path | None:
        """The file a value's ``data_name`` names, or None when it names none or the file is not there.

        The name comes from a file someone else wrote: it must be a plain file
        name inside the dump's tensor folder, and what is there a regular file
        (no link, no FIFO that would hang the reader). Anything else is an
        error naming the dump, the entry and the name.
        """
        if not data_name or data_name == "-1":
            return None
        where = f"entry '{entry}': " if entry else ""
        if Path(data_name).name != data_name or data_name in (".", ".."):
            raise DataFileError(self.path, f"{where}data_name {data_name!r} is not a file name inside the dump folder")
        folder = self.tensor_dir()
        if folder is None:
            return None
        path = folder / data_name
        try:
            mode = os.lstat(path).st_mode
        except FileNotFoundError:
            return None
        except OSError as exc:
            raise DataFileError(path, f"{where}cannot be read ({exc.strerror})") from None
        if not stat.S_ISREG(mode):
            raise DataFileError(path, f"{where}data_name {data_name!r} is not a regular file")
        return path


def _load_json(path: Path, what: str) -> Any:
    regular_file(path, what)
    try:
        with open(path, "rb") as handle:
            text = handle.read()
        lone = lone_surrogate_message(text)
        if lone is not None:
            raise DataFileError(path, lone)
        return json.loads(text.decode("utf-8"))
    except FileNotFoundError:
        raise DataFileError(path, f"{what} not found") from None
    except json.JSONDecodeError as exc:
        raise DataFileError(path, f"invalid JSON at line {exc.lineno}, column {exc.colno}: {exc.msg}") from None
    except (OSError, UnicodeDecodeError) as exc:
        raise DataFileError(path, f"cannot be read ({exc})") from None
    except RecursionError:
        raise DataFileError(path, f"{what} is nested too deeply") from None


def _replay_journal(journal: Path) -> tuple[dict, dict, dict, dict]:
    """The entries a journal holds. A line that cannot be read (the last one of a killed process is often
    cut short; a damaged disk may spoil others) is skipped and counted, and the count is reported."""
    data: dict[str, Any] = {}
    stack: dict[str, Any] = {}
    construct: dict[str, Any] = {}
    header: dict[str, Any] = {}
    targets = {"data": data, "stack": stack, "construct": construct}
    unreadable = 0
    with open(journal, encoding="utf-8", errors="replace") as handle:
        for line in handle:
            if not line.strip("\0 \t\r\n"):  # a live or killed writer's journal ends in reserved zero bytes
                continue
            try:
                kind, name, value = json.loads(line)
            except (ValueError, TypeError, RecursionError):
                unreadable += 1
                continue
            if kind == "header" and isinstance(value, dict):
                header = value
            elif kind in targets and isinstance(name, str):
                targets[kind][name] = value
            else:
                unreadable += 1
    if unreadable:
        logger.warning(
            "%s: %d entries recovered; %d journal lines could not be read and are lost", journal, len(data), unreadable
        )
    return header, data, stack, construct


def read_dump(path: str | Path) -> Dump:
    """Read ``dump.json`` (or the folder holding it); optional stack/construct files may be absent."""
    path = Path(path)
    folder = path if path.is_dir() else path.parent
    dump_json = folder / "dump.json" if path.is_dir() else path
    journal = folder / JOURNAL_NAME
    if not dump_json.exists() and journal.exists():
        header, data, stack, construct = _replay_journal(regular_file(journal, "journal"))
        logger.warning("%s: dump.json missing; recovered %d entries from an interrupted run", folder, len(data))
        return Dump.from_header(dump_json, header, data, stack=stack, construct=construct, recovered=True)
    raw = _load_json(dump_json, "dump.json")
    if not isinstance(raw, dict) or not isinstance(raw.get("data"), dict):
        raise DataFileError(dump_json, "not a dump.json: expected an object with a 'data' object")
    for name, entry in raw["data"].items():
        if not isinstance(entry, dict):
            raise DataFileError(dump_json, f"entry '{name}' is not an object")
    stack = read_stacks(folder)
    construct = _optional(folder / "construct.json")
    return Dump.from_header(dump_json, raw, raw["data"], stack=stack, construct=construct)


def read_stacks(folder: Path) -> dict:
    """The folder's stack.json as name -> frames ({} when there is none)."""
    return read_stack_file(folder / "stack.json")


def read_stack_file(path: Path) -> dict:
    """A stack.json as name -> frames ({} when there is none)."""
    return _stacks_by_name(_optional(path))


def _stacks_by_name(stack: dict) -> dict:
    """stack.json as name -> frames. mindstudio-probe 26.x groups the names that share a stack:
    ``{"0": [[name, ...], [frame, ...]], ...}``; that form is opened out."""
    grouped = stack and all(
        isinstance(value, list) and len(value) == 2 and isinstance(value[0], list) and isinstance(value[1], list)
        for value in stack.values()
    )
    if not grouped:
        return stack
    return {str(name): frames for names, frames in stack.values() for name in names}


def _optional(path: Path) -> dict:
    if not path.exists():
        return {}
    value = _load_json(path, path.name)
    if not isinstance(value, dict):
        raise DataFileError(path, f"expected a JSON object (name -> value), found {type(value).__name__}")
    return value


def journal_folders(root: Path) -> list[Path]:
    """The folders under ``root`` (itself included) that hold a journal and no dump.json: killed steps."""
    root = Path(root)
    found = [folder.parent for folder in sorted(root.rglob(JOURNAL_NAME))] if root.is_dir() else []
    return [folder for folder in found if not (folder / "dump.json").exists()]


def recover(folder: Path) -> int:
    """Turn a killed step's journal into ordinary dump.json, stack.json and construct.json; returns the number
    of entries. The journal is removed only once the three files are written."""
    from msprobe.core.files import write_json_atomic

    folder = Path(folder)
    dump = read_dump(folder)
    if not dump.recovered:
        raise DataFileError(folder, "has a dump.json already: nothing to recover")
    header = {"task": dump.task, "level": dump.level, "framework": dump.framework, "dump_data_dir": dump.dump_data_dir}
    write_json_atomic(folder / "dump.json", {**header, "data": dump.data})
    write_json_atomic(folder / "stack.json", dump.stack)
    write_json_atomic(folder / "construct.json", dump.construct)
    (folder / JOURNAL_NAME).unlink(missing_ok=True)
    return len(dump.data)
