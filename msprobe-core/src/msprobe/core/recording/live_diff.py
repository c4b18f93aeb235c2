"""The live md5 diff (mindstudio-probe 26.x's ``bench_path`` and ``diff_nums``, task ``tensor``).

Each call's checksums (``summary_mode`` md5 or xor) are compared, as the
run goes, with those of an earlier dump of the same script; tensor files are
written only for the first ``diff_nums`` calls whose values differ, so a
deterministic-problem hunt costs an md5 dump plus the tensors that matter.

Calls pair as the compare pairs them: by name first, when the bench's call
of that name has tensors of the same shapes; otherwise (a call
counted differently because of an extra or missing call) with the bench's
first unpaired call of the same API and direction whose tensors have the
same dtypes and shapes. A call with no partner is an
extra call, a bench call never paired a missing one: both are reported and
neither is counted as a difference. ``diff_report.json`` in the step's
folder names where the step parts ways from the bench, as the diagnosis
(``msprobe.core.diagnosis``, the same answer as ``msprobe compare``) decides
it from the two steps' dumps, with its stack; one log line says it too.
"""

from __future__ import annotations

import json
import logging
from collections import defaultdict
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

from msprobe.core.dump.entry_names import parse_entry
from msprobe.core.errors import DataFileError
from msprobe.core.files import write_json_atomic

logger = logging.getLogger(__name__)

REPORT_NAME = "diff_report.json"
ENTRY_SECTIONS = ("input_args", "input_kwargs", "input", "output", "parameters")
_MOST_LISTED = 1000  # names listed per category in the report


def _is_leaf(value: dict) -> bool:
    """A value's summary (a tensor's, or a plain value's), not a dict of arguments: its "type" is a name.
    A kwargs dict may well hold an argument called dtype or type."""
    return isinstance(value.get("type"), str)


def value_summaries(entry: Any, sections: tuple[str, ...] = ENTRY_SECTIONS) -> Iterator[dict]:
    """Each value summary of an entry's sections, in order (summaries handed over as JSON text included)."""

    def walk(value: Any) -> Iterator[dict]:
        if isinstance(value, dict):
            if _is_leaf(value):
                yield value
                return
            for item in value.values():
                yield from walk(item)
        elif isinstance(value, list):
            for item in value:
                yield from walk(item)
        elif hasattr(value, "value") and callable(value.value):
            yield from walk(value.value())

    if isinstance(entry, dict):
        for key in sections:
            if key in entry:
                yield from walk(entry[key])


def checksums(entry: Any) -> list[Any]:
    """The md5 of every value of an entry, in order (None for a value that is no tensor)."""
    return [leaf.get("md5") for leaf in value_summaries(entry)]


def structure(entry: Any) -> list[Any]:
    """Dtypes and shapes of an entry's tensors: what the fuzzy pairing looks at."""
    leaves = value_summaries(entry, ENTRY_SECTIONS[:-1])
    return [(leaf.get("dtype"), tuple(leaf.get("shape") or ())) for leaf in leaves if "shape" in leaf]


def _shapes(found: list[Any]) -> list[Any]:
    return [shape for _dtype, shape in found]


def _kind(name: str) -> str:
    """The API and direction of an entry name, without its count: the fuzzy pairing's key."""
    parsed = parse_entry(name)
    return parsed.without_count() if parsed is not None and parsed.direction else name


class LiveDiff:
    """Pairs one step's calls with the bench's and keeps the report."""

    def __init__(self, session: Any):
        self.session = session
        section = session.config.tensor
        self.bench_root = Path(section.bench_path)
        self.limit = section.diff_nums
        self.bench: dict[str, Any] = {}
        self.by_kind: dict[str, list[str]] = defaultdict(list)
        self.paired: set[str] = set()
        self.divergent: list[str] = []
        self.extra: list[str] = []
        self.first: dict[str, Any] | None = None
        self.written = 0  # divergent calls whose tensors were written
        self.bench_folder: Path | None = None
        self.bench_dump: Any = None
        self.unreadable: str | None = None  # why this step's bench could not be read: no diff this step
        self._structures: dict[str, list[Any]] = {}
        self._read: tuple[Any, Any] | None = None  # (the bench file's identity, its dump): parsed once

    # -- a step ----------------------------------------------------------------------
    def open_step(self) -> None:
        from msprobe.core.dump.reader import read_dump

        self.bench, self.paired, self.divergent, self.extra, self.first = {}, set(), [], [], None
        self.by_kind = defaultdict(list)
        self._structures = {}
        self.written = 0
        self.unreadable, self.bench_folder = None, None
        try:
            self.bench_folder = self._bench_folder()
            dump = self._bench_dump(self.bench_folder, read_dump)
        except (DataFileError, OSError) as exc:
            self.unreadable, self.bench_dump = str(exc), None
            logger.warning("msprobe live diff: step %d is dumped without a diff: %s", self.session.step, exc)
            return
        self.bench_dump = dump
        self.bench = dict(dump.data)
        for name in self.bench:
            self.by_kind[_kind(name)].append(name)

    def _bench_dump(self, folder: Path, read_dump: Callable[[Path], Any]) -> Any:
        """The bench's dump, parsed again only when its file changed: one bench dump.json given for every
        step would otherwise be read whole at each step (seconds for a large model)."""
        info = (folder / "dump.json").stat()
        identity = (folder.resolve(), info.st_ino, info.st_size, info.st_mtime_ns)
        if self._read is None or self._read[0] != identity:
            self._read = (identity, read_dump(folder))
        return self._read[1]

    def _bench_folder(self) -> Path:
        """The bench step folder matching this one: ``bench_path/step{N}/rank{R}``, or bench_path itself when
        it holds a dump.json (one step given for every step)."""
        root = self.bench_root
        if (root / "dump.json").is_file():
            return root
        if root.is_file() and root.name == "dump.json":
            return root.parent
        step = root / f"step{self.session.step}"
        if not step.is_dir():
            raise DataFileError(root, f"tensor.bench_path holds no step{self.session.step} folder and no dump.json")
        rank = self.session.rank
        wanted = f"rank{rank}" if rank is not None else "rank"
        if (step / wanted / "dump.json").is_file():
            return step / wanted
        folders = [p for p in step.iterdir() if p.is_dir() and (p / "dump.json").is_file()]
        if rank is None and len(folders) == 1:  # 26.x's proc{pid} folder
            return folders[0]
        raise DataFileError(step, f"tensor.bench_path holds no {wanted} folder with a dump.json")

    # -- a call -------------------------------------------------------------------------
    def check(self, name: str, entry: Any) -> str:
        """'same', 'divergent', 'extra' (no partner in the bench), or 'unchecked' (no bench this step)."""
        if self.unreadable is not None:
            return "unchecked"
        partner = self._partner(name, entry)
        if partner is None:
            self.extra.append(name)
            return "extra"
        self.paired.add(partner)
        if checksums(entry) == checksums(self.bench[partner]):
            return "same"
        self.divergent.append(name)
        return "divergent"

    def _partner(self, name: str, entry: Any) -> str | None:
        shape = structure(entry)
        if name in self.bench and name not in self.paired and _shapes(self._structure(name)) == _shapes(shape):
            return name  # the same name and shapes: a dtype that differs is a difference to report
        for candidate in self.by_kind.get(_kind(name), ()):
            if candidate not in self.paired and self._structure(candidate) == shape:
                return candidate
        return None

    def _structure(self, name: str) -> list[Any]:
        found = self._structures.get(name)
        if found is None:
            found = self._structures[name] = structure(self.bench[name])
        return found

    def wants_tensors(self) -> bool:
        """Whether the divergent call just checked gets its tensors written (the first ``diff_nums``)."""
        if self.limit != -1 and self.written >= self.limit:
            return False
        self.written += 1
        return True

    def divergence(self, name: str, stack: Any, parent: Any) -> None:
        if self.first is not None:
            return
        self.first = {
            "api": name,
            "step": self.session.step,
            "rank": self.session.rank,
            "module": parent if isinstance(parent, str) else None,
            "stack": _frames(stack),
        }

    def write_report(self, folder: Path) -> None:
        """``diff_report.json``, once the step's own files are written: the diagnosis compares them with the
        bench's (the call-by-call checksums only chose which tensors to write)."""
        if self.unreadable is not None:  # the report says so, rather than counting every call as extra
            report = {"bench": str(self.bench_folder or self.bench_root), "error": self.unreadable,
                      "answer": None, "diagnosis": None, "first_divergence": None}  # fmt: skip
            write_json_atomic(folder / REPORT_NAME, report, indent=2)
            return
        missing = [name for name in self.bench if name not in self.paired]
        diagnosis = self._diagnose(folder)
        first = self.first
        if diagnosis is not None:
            first = None
            if diagnosis.verdict == "divergence":
                first = {
                    "api": diagnosis.api,
                    "step": self.session.step,
                    "rank": self.session.rank,
                    "module": diagnosis.module,
                    "stack": _frames(self._stack(folder, diagnosis.api)),
                }
            logger.warning("msprobe live diff against %s, step %d: %s", self.bench_folder, self.session.step,
                           diagnosis.line())  # fmt: skip
        report = {
            "bench": str(self.bench_folder),
            "answer": diagnosis.line() if diagnosis is not None else None,
            "diagnosis": diagnosis.as_dict() if diagnosis is not None else None,
            "first_divergence": first,
            "divergent": self.divergent[:_MOST_LISTED],
            "divergent_count": len(self.divergent),
            "extra": self.extra[:_MOST_LISTED],
            "extra_count": len(self.extra),
            "missing": missing[:_MOST_LISTED],
            "missing_count": len(missing),
        }
        write_json_atomic(folder / REPORT_NAME, report, indent=2)

    def _diagnose(self, folder: Path) -> Any:
        """The diagnosis of this step against the bench's; None (and a warning) when it cannot be made: the
        report then keeps the first call whose checksums differed."""
        from msprobe.core.diagnosis import diagnose_dumps, diagnosis_fits
        from msprobe.core.dump.reader import read_dump

        try:
            fits, why = diagnosis_fits(folder, self.bench_folder)
            if not fits:
                logger.warning("msprobe live diff: %s", why)
                return None
            found = diagnose_dumps(read_dump(folder), self.bench_dump)[0]
        except Exception as exc:  # the training goes on; the report says what the checksums said
            logger.warning("msprobe live diff: step %d could not be diagnosed: %s", self.session.step, exc)
            return None
        found.step, found.rank = self.session.step, self.session.rank
        return found

    def _stack(self, folder: Path, name: str | None) -> Any:
        from msprobe.core.dump.reader import read_stacks

        return read_stacks(folder).get(name) if name else None


def _frames(stack: Any) -> list[str]:
    if stack is None:
        return []
    if isinstance(stack, list):
        return stack
    try:
        frames = json.loads(str(stack))
    except ValueError:
        return []
    return frames if isinstance(frames, list) else []
