"""``msprobe db build``: the statistics of every step and rank, written once each as Parquet.

Layout of a store::

    STORE/msprobe_store.json                     what was read, so a re-run adds only what is new or changed
    STORE/stats/step=N/rank=R/dump.parquet       one row per tensor of step N, rank R
    STORE/stats/step=N/rank=R/monitor-KIND.parquet
    STORE/stacks/step=N/rank=R/dump.parquet      stack_id -> the stack's text

A source is a step/rank dump folder or a monitor CSV; the sources of one rank
are one job, and the jobs run on the chosen engine (this machine's processes
or Ray). A part is written under a
temporary name and renamed into place, and the manifest is written when the
build ends, so an interrupted build leaves no half-written part and the next
run redoes what it had not recorded.
"""

from __future__ import annotations

import json
import logging
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from msprobe.core.dump.reader import read_dump
from msprobe.core.errors import DataFileError, UsageError
from msprobe.core.files import new_file, write_new_text
from msprobe.core.jobs import LOCAL, Engine, run_jobs
from msprobe.core.monitor.tensorboard import CSV_FILE
from msprobe.core.store import require
from msprobe.core.store.rows import MONITOR_RUN, dump_columns, monitor_columns

logger = logging.getLogger(__name__)

MANIFEST = "msprobe_store.json"
STORE_VERSION = 1
FORMATS = ("auto", "dump", "monitor")
_STEP = re.compile(r"^step(\d+)$")
_RANK = re.compile(r"^rank(\d*)$")


def stats_schema() -> Any:
    pa = require("pyarrow")
    return pa.schema(
        [
            ("source", pa.string()),
            ("seq", pa.int64()),
            ("name", pa.string()),
            ("module", pa.string()),
            ("direction", pa.string()),
            ("io", pa.string()),
            ("arg", pa.string()),
            ("dtype", pa.string()),
            ("shape", pa.list_(pa.int64())),
            ("max", pa.float64()),
            ("min", pa.float64()),
            ("mean", pa.float64()),
            ("norm", pa.float64()),
            ("md5", pa.string()),
            ("stack_id", pa.int64()),
        ]
    )


@dataclass(frozen=True)
class Source:
    """One job: a dump folder (one step and rank) or a monitor CSV (one rank, a range of steps)."""

    key: str  # its name in the manifest
    path: str
    kind: str  # "dump", or the monitor kind (actv, grad_reduced, ...)
    rank: int
    step: int | None  # None for a monitor CSV: its rows say
    fingerprint: tuple[int, int]  # (size, mtime_ns) of the file read

    @property
    def part(self) -> str:
        return "dump.parquet" if self.kind == "dump" else f"monitor-{self.kind}.parquet"


@dataclass
class BuildSummary:
    store: Path
    added: list[str] = field(default_factory=list)
    unchanged: int = 0
    rows: int = 0
    removed: list[str] = field(default_factory=list)
    repaired: list[str] = field(default_factory=list)

    def line(self) -> str:
        return (
            f"store {self.store}: {len(self.added)} source(s) added or updated, {self.unchanged} unchanged, "
            f"{len(self.removed)} removed (gone from the data), {len(self.repaired)} repaired, "
            f"{self.rows} rows written"
        )


def _fingerprint(path: Path) -> tuple[int, int]:
    status = path.stat()
    return status.st_size, status.st_mtime_ns


def find_dump_sources(root: Path) -> list[Source]:
    """``root/step{N}/rank{R}/dump.json`` (``rank`` alone: rank 0)."""
    sources = []
    for step_dir in sorted(root.iterdir()):
        step_match = _STEP.match(step_dir.name)
        if not step_match or not step_dir.is_dir():
            continue
        for rank_dir in sorted(step_dir.iterdir()):
            rank_match = _RANK.match(rank_dir.name)
            dump_json = rank_dir / "dump.json"
            if not rank_match or not dump_json.is_file():
                continue
            step, rank = int(step_match.group(1)), int(rank_match.group(1) or 0)
            key = f"dump/step{step}/rank{rank}"
            sources.append(Source(key, str(rank_dir), "dump", rank, step, _fingerprint(dump_json)))
    return _one_per_key(sources)


def _one_per_key(sources: list[Source]) -> list[Source]:
    """step01 and step1 (or rank and rank0) are one step and rank of the store: one would overwrite the other."""
    seen: dict[str, Source] = {}
    for source in sources:
        other = seen.setdefault(source.key, source)
        if other is not source:
            raise DataFileError(
                source.path, f"is {source.key.split('/', 1)[1]} of the store, as {other.path} is; keep one of them"
            )
    return sources


def find_monitor_sources(root: Path) -> list[Source]:
    """``root/{time}-rank{R}/{kind}_{first}-{last}.csv``, as the monitor writes them."""
    sources = []
    for run in sorted(root.iterdir()):
        run_match = MONITOR_RUN.search(run.name)
        if not run_match or not run.is_dir():
            continue
        for csv in sorted(run.glob("*.csv")):
            file_match = CSV_FILE.match(csv.name)
            if not file_match:
                continue
            key = f"monitor/{run.name}/{csv.name}"
            rank = int(run_match.group("rank"))
            sources.append(Source(key, str(csv), file_match.group("kind"), rank, None, _fingerprint(csv)))
    return sources


def find_sources(root: Path, data_format: str = "auto") -> list[Source]:
    if data_format not in FORMATS:
        raise UsageError(f"format '{data_format}' is unknown; choose one of {', '.join(FORMATS)}")
    if not root.is_dir():
        raise DataFileError(root, "not a folder (give the folder holding step{N} folders, or the monitor output)")
    found: list[Source] = []
    if data_format in ("auto", "dump"):
        found += find_dump_sources(root)
    if data_format in ("auto", "monitor"):
        found += find_monitor_sources(root)
    if not found:
        wanted = {
            "dump": "step{N}/rank{R}/dump.json folders",
            "monitor": "{time}-rank{R} folders of monitor CSVs",
            "auto": "step{N}/rank{R}/dump.json folders or {time}-rank{R} folders of monitor CSVs",
        }[data_format]
        raise DataFileError(root, f"holds no {wanted}")
    return found


def _write_part(table: Any, folder: Path, name: str) -> None:
    pq = require("pyarrow.parquet")
    with new_file(folder / name) as handle:  # a part is there whole or not at all
        pq.write_table(table, handle, compression="zstd")


def _partition(store: Path, table: str, step: int, rank: int) -> Path:
    return store / table / f"step={step}" / f"rank={rank}"


def build_rank(job: tuple[list[Source], str, dict[str, str] | None]) -> list[tuple[str, int, list[str]]]:
    """One job: the new sources of one rank; returns (key, rows written) for each. Runs in a worker."""
    sources, store, rename = job
    return [build_source(source, Path(store), rename) for source in sources]


def build_source(source: Source, store: Path, rename: dict[str, str] | None) -> tuple[str, int, list[str]]:
    """Read one source and write its part(s); returns its key, the rows written and the parts (relative to
    the store), so a later build can remove or check them."""
    pa = require("pyarrow")
    schema = stats_schema()
    if source.kind == "dump":
        columns, stacks = dump_columns(read_dump(source.path), rename)
        stats = _partition(store, "stats", source.step, source.rank)
        _write_part(pa.Table.from_pydict(columns, schema=schema), stats, source.part)
        stack_table = pa.Table.from_pydict(
            {"stack_id": list(stacks), "stack": list(stacks.values())},
            schema=pa.schema([("stack_id", pa.int64()), ("stack", pa.string())]),
        )
        stacks_folder = _partition(store, "stacks", source.step, source.rank)
        _write_part(stack_table, stacks_folder, source.part)
        parts = [str((folder / source.part).relative_to(store)) for folder in (stats, stacks_folder)]
        return source.key, len(columns["seq"]), parts
    written, parts = 0, []
    for step, columns in monitor_columns(Path(source.path), source.kind, rename).items():
        folder = _partition(store, "stats", step, source.rank)
        _write_part(pa.Table.from_pydict(columns, schema=schema), folder, source.part)
        parts.append(str((folder / source.part).relative_to(store)))
        written += len(columns["seq"])
    return source.key, written, parts


def _read_manifest(store: Path) -> dict[str, Any]:
    path = store / MANIFEST
    if not path.exists():
        if store.exists() and any(store.iterdir()):
            raise UsageError(f"{store} exists and is not an msprobe store (no {MANIFEST}); choose another -o")
        return {"version": STORE_VERSION, "sources": {}}
    try:
        manifest = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        raise DataFileError(path, f"unreadable store manifest ({exc})") from None
    if not isinstance(manifest, dict) or not isinstance(manifest.get("sources"), dict):
        raise DataFileError(path, "field 'sources': expected an object")
    if manifest.get("version") != STORE_VERSION:
        raise DataFileError(path, f"field 'version': store version {manifest.get('version')!r}, not {STORE_VERSION}")
    for key, entry in manifest["sources"].items():
        fingerprint = entry.get("fingerprint") if isinstance(entry, dict) else None
        parts = entry.get("parts", []) if isinstance(entry, dict) else None
        if not (isinstance(fingerprint, list) and isinstance(parts, list) and all(isinstance(p, str) for p in parts)):
            raise DataFileError(path, f"field 'sources.{key}': expected an object with a fingerprint and parts")
        if any(Path(part).is_absolute() or ".." in Path(part).parts for part in parts):
            raise DataFileError(path, f"field 'sources.{key}.parts': a part outside the store")
    return manifest


def _parts_of(key: str, entry: dict[str, Any]) -> list[str]:
    """The parts a source wrote (stores from before parts were listed: a dump source's two)."""
    if "parts" in entry:
        return entry["parts"]
    match = re.fullmatch(r"dump/step(\d+)/rank(\d+)", key)
    if match is None:
        return []
    step, rank = match.groups()
    return [f"{table}/step={step}/rank={rank}/dump.parquet" for table in ("stats", "stacks")]


def _parts_intact(store: Path, parts: list[str]) -> bool:
    """Each part is there and its Parquet footer reads: a part cut short or damaged is built again."""
    pq = require("pyarrow.parquet")
    for part in parts:
        try:
            pq.read_metadata(store / part)
        except Exception:  # pyarrow raises several kinds for a damaged file
            return False
    return True


def _remove_parts(store: Path, parts: list[str]) -> None:
    for part in parts:
        (store / part).unlink(missing_ok=True)


def _write_manifest(store: Path, manifest: dict[str, Any]) -> None:
    write_new_text(store / MANIFEST, json.dumps(manifest, indent=1, sort_keys=True))


def read_mapping(path: str | Path | None) -> dict[str, str] | None:
    """data2db's mapping file: a JSON object of text -> replacement."""
    if path is None:
        return None
    path = Path(path)
    try:
        mapping = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        raise DataFileError(path, f"unreadable mapping ({exc})") from None
    if not isinstance(mapping, dict) or not all(isinstance(k, str) and isinstance(v, str) for k, v in mapping.items()):
        raise DataFileError(path, "expected a JSON object whose keys and values are strings")
    return mapping


def build_store(
    data: str | Path,
    store: str | Path,
    data_format: str = "auto",
    engine: Engine = LOCAL,
    mapping: str | Path | None = None,
) -> BuildSummary:
    """Add to ``store`` every source under ``data`` that is new or changed since the last build."""
    require("pyarrow")
    root, store = Path(data).expanduser(), Path(store).expanduser()
    rename = read_mapping(mapping)
    sources = find_sources(root, data_format)
    manifest = _read_manifest(store)
    store.mkdir(parents=True, exist_ok=True)
    known = manifest["sources"]
    mapping_text = json.dumps(rename, sort_keys=True) if rename else None
    if manifest.get("mapping") != mapping_text and known:
        raise UsageError(f"{store} was built with another --mapping; build a new store (-o)")
    manifest["mapping"] = mapping_text
    _write_manifest(store, manifest)  # first of all: a build killed before its end is resumed, not refused
    summary = BuildSummary(store)
    scanned = {"auto": ("dump/", "monitor/"), "dump": ("dump/",), "monitor": ("monitor/",)}[data_format]
    present = {source.key for source in sources}
    for key in [key for key in known if key.startswith(scanned) and key not in present]:
        _remove_parts(store, _parts_of(key, known.pop(key)))  # its folder is gone from the data
        summary.removed.append(key)
    todo = []
    for source in sources:
        entry = known.get(source.key)
        if entry is None or entry.get("fingerprint") != list(source.fingerprint):
            todo.append(source)
        elif not _parts_intact(store, _parts_of(source.key, entry)):
            summary.repaired.append(source.key)
            todo.append(source)
        else:
            summary.unchanged += 1
    by_key = {source.key: source for source in todo}
    by_rank: dict[int, list[Source]] = {}
    for source in todo:
        by_rank.setdefault(source.rank, []).append(source)
    jobs = [(sources, str(store), rename) for _, sources in sorted(by_rank.items())]

    def record(_index: int, results: list[tuple[str, int, list[str]]]) -> None:
        for key, rows, parts in results:
            source = by_key[key]
            known[key] = {"path": source.path, "fingerprint": list(source.fingerprint), "rows": rows, "parts": parts}
            summary.added.append(key)
            summary.rows += rows
        _write_manifest(store, manifest)  # each rank as it is done: a killed build keeps what it finished

    run_jobs(build_rank, jobs, engine, "ranks", on_result=record)
    _write_manifest(store, manifest)  # sources removed above, when nothing was built
    logger.info("%s", summary.line())
    return summary
