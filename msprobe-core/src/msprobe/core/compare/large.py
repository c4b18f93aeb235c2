"""A statistics or md5 compare of two large dumps, a block of calls at a time.

The in-memory compare holds both dumps as Python objects and the whole
table besides: about 8 KB per entry, 8 GB for a million entries. Here the
bench side is read first and kept as rows (one copy of each shape and dtype
text among them), and the NPU side is read a block of whole calls at a time.
Each block is matched here, then tabled, highlighted and written to the CSV
(and the xlsx) by the compare's one pipeline (pipeline.py) before the next is
read; the in-memory compare passes its pairs through it as one block, so
both give the same files. Bench values with no NPU partner follow at the
end, as there.

On two cores a forked helper reads part of the bench file, and, where no
xlsx is written (its rows have one writer), compares the later half of the
NPU file into a file of its own, appended to the CSV in order. What it
matched and what its advisor saw are merged back.

Only what is local to a call is done this way: fuzzy matching, name
mappings and the tensor mode stay in memory (``NeedsWholeDumps`` sends the
compare there, even part way through, as when md5 values turn up in the NPU
side only after its first block, which chose the mode).
"""

from __future__ import annotations

import contextlib
import logging
import os
import shutil
import sys
from array import array
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from msprobe.core.compare.oplog import OP_LOG_LEVEL
from msprobe.core.compare.pipeline import CompareCounts, ResultFiles, TableBlocks
from msprobe.core.compare.rows import Row, c_builder, dump_rows, named_after_files
from msprobe.core.compare.tables import (
    MD5_COLUMNS,
    STATISTICS_COLUMNS,
    calls_of_one_structure,
    same_structure,
    with_plugin_columns,
)
from msprobe.core.compare.xlsx import XLSX_ROW_LIMIT, SheetRows
from msprobe.core.dump import block_reader
from msprobe.core.dump.reader import Dump, read_stack_file, read_stacks
from msprobe.core.errors import MsprobeError
from msprobe.core.files import create_private
from msprobe.core.spreadsheet import CsvTableWriter

logger = logging.getLogger(__name__)

STREAM_ENV = "MSPROBE_COMPARE_STREAM"  # "always" or "never"; unset: by size
STREAM_FROM_BYTES = 64 << 20  # the two dump.json files together; below this the in-memory compare is as fast


class NeedsWholeDumps(Exception):
    """This pair needs the in-memory compare; the message says why (logged at debug level)."""


def wanted(npu_json: Path, bench_json: Path, fuzzy: bool, mapped: bool) -> bool:
    """Whether to stream this pair: possible here, and the files large enough (or ``MSPROBE_COMPARE_STREAM``)."""
    choice = os.environ.get(STREAM_ENV, "").strip().lower()
    if choice == "never" or fuzzy or mapped or not block_reader.available():
        return False
    if not (npu_json.is_file() and bench_json.is_file()):
        return False  # a folder, or a killed run's journal: the reader knows what to do
    if choice == "always":
        return True
    return npu_json.stat().st_size + bench_json.stat().st_size >= STREAM_FROM_BYTES


Counter = Callable[[int], None]  # told the bytes one reader has parsed so far


class _NameHashes:
    """The entry names read so far, kept as 8-byte hashes: whether one occurs twice is all the compare asks,
    and a set of the names themselves would grow by some 100 bytes an entry (a gigabyte for a dump of ten
    million empty entries). Two names with one hash would read as a repeat: the pair is then compared in
    memory, with that reason logged."""

    def __init__(self, hashes: bytes = b"") -> None:
        self._hashes = array("q", hashes)

    def add(self, names: list[str]) -> None:
        self._hashes.extend(map(hash, names))

    def has_repeat(self) -> bool:
        ordered = np.sort(np.frombuffer(self._hashes, dtype=np.int64))
        return bool(np.any(ordered[1:] == ordered[:-1]))

    def take(self, other: _NameHashes) -> None:
        self._hashes.extend(other._hashes)

    def __len__(self) -> int:
        return len(self._hashes)

    def __reduce__(self) -> tuple[Any, ...]:  # crosses to the parent from a helper as bytes
        return (_NameHashes, (self._hashes.tobytes(),))


class Progress:
    """Bytes of the two dump.json files read, by this process and its helper, as a tqdm bar on a terminal."""

    def __init__(self, total: int):
        self.total = total
        self._bar: Any = None
        if total:
            from tqdm import tqdm

            self._bar = tqdm(total=total, unit="B", unit_scale=True, desc="compare", disable=None, leave=False)
        self._done = 0  # by readers of this process that have finished
        self._reading = 0  # by the one reading now
        self._helper: Any = None  # shared memory a helper counts in

    def for_this_process(self) -> Counter:
        self._done += self._reading
        self._reading = 0

        def count(parsed: int) -> None:
            self._reading = parsed
            self.refresh()

        return count

    def for_helper(self) -> Counter:
        """A counter for a helper about to be forked (it counts in memory both processes share)."""
        import multiprocessing

        if self._helper is not None:
            self._done += self._helper.value
        self._helper = multiprocessing.get_context("fork").RawValue("q", 0)
        shared = self._helper

        def count(parsed: int) -> None:
            shared.value = parsed

        return count

    @property
    def bytes(self) -> int:
        return self._done + self._reading + (self._helper.value if self._helper is not None else 0)

    def refresh(self) -> None:
        if self._bar is not None:
            self._bar.update(min(self.bytes, self.total) - self._bar.n)

    def __enter__(self) -> Progress:
        return self

    def __exit__(self, *_exception: Any) -> None:
        if self._bar is not None:
            self.refresh()
            self._bar.close()


class _BenchSide:
    """The bench dump's rows, with one copy of each shape, dtype and call name among them; and where each
    name's first row and each call's rows are."""

    def __init__(self) -> None:
        self.rows: list[Row] = []
        self.first_of: dict[str, int] = {}  # a name's first row: the one an NPU row pairs with
        self.call_starts: dict[str, int] = {}
        self.call_ends: dict[str, int] = {}
        self.has_md5 = False
        self._interned: dict[Any, Any] = {}

    def add(self, rows: list[Row]) -> None:
        if (builder := c_builder()) is not None:
            has_md5 = builder.index_rows(
                rows, len(self.rows), self.first_of, self.call_starts, self.call_ends, self._interned
            )
            self.has_md5 = self.has_md5 or has_md5
            self.rows.extend(rows)
            return
        intern = self._interned.setdefault
        first_of, starts, ends = self.first_of, self.call_starts, self.call_ends
        index = len(self.rows)
        for row in rows:
            first_of.setdefault(row.name, index)
            starts.setdefault(row.entry, index)
            index += 1
            ends[row.entry] = index
            row.dtype = intern(row.dtype, row.dtype)
            if type(row.shape) is list:
                row.shape = intern(tuple(row.shape), row.shape)
            if row.md5 and row.shown_dtype == "":
                self.has_md5 = True
        self.rows.extend(rows)

    def get(self, entry: str, default: Any = None) -> list[Row]:
        """The rows of one bench call (none for an entry it lacks), for the structure check: the bench side
        stands in for the in-memory compare's dict of calls."""
        start = self.call_starts.get(entry)
        return [] if start is None else self.rows[start : self.call_ends[entry]]


def _bench_rows(
    path: Path, part: tuple[int, int] | None, progress: Counter
) -> tuple[list[Row], _NameHashes, dict[str, Any]]:
    """The rows of (a part of) the bench dump, the names of its entries, and the header fields."""
    reader = block_reader.DumpStream(path)
    rows: list[Row] = []
    entries = _NameHashes()
    for block_rows, names in _row_blocks(reader, part):
        _check_header(reader.header, path)
        rows.extend(block_rows)
        entries.add(names)
        progress(reader.parsed_bytes)
    _check_header(reader.header, path)
    return rows, entries, reader.header


def _row_blocks(reader: block_reader.DumpStream, part: tuple[int, int] | None) -> Iterator[tuple[list[Row], list]]:
    """The rows of each block of a dump.json and the names of its entries (a name twice: the file holds it
    twice). With the C builder, rows come straight from the text for the common entry (``parse_rows``); any
    other entry is parsed as a dict and goes the Python way."""
    path = reader.path
    builder = c_builder()
    if builder is None:
        for block in reader.blocks(part):
            yield dump_rows(Dump.from_header(path, reader.header, block), every_value=True), list(block)
        return

    def parse(text: bytes, start: int, stop: int, commas: list[int]) -> tuple[list[Row], list[str]]:
        rows: list[Row] = []
        names: list[str] = []

        def other(first: int, end: int) -> None:
            block = reader.members(first, end)
            rows.extend(dump_rows(Dump.from_header(path, reader.header, block), every_value=True))
            names.extend(block)

        builder.parse_rows(text, start, stop, commas, rows, names, other)
        return named_after_files(rows), names

    yield from reader.blocks(part, parse)


def _later_bench_rows(
    path: Path, part: tuple[int, int], progress: Counter
) -> tuple[list[tuple], _NameHashes, dict[str, Any]]:
    """A helper's share of the bench dump, as tuples: they cross between processes three times faster."""
    rows, entries, header = _bench_rows(path, part, progress)
    return (
        [(r.name, r.entry, r.dtype, r.shape, r.stats, r.md5, r.data_name, r.role, r.shown_dtype) for r in rows],
        entries,
        header,
    )


def _read_bench(path: Path, processes: int = 1, progress: Progress | None = None) -> tuple[_BenchSide, dict[str, Any]]:
    """The bench side, read by two processes (each a part of the file) when ``processes`` allows."""
    progress = progress or Progress(0)
    bench = _BenchSide()
    size = path.stat().st_size
    if processes > 1 and size >= HELPER_FROM_BYTES and _can_fork():
        # the helper's rows cross to this process and are taken in here after it ends: it reads the smaller part
        split = int(size * 0.6)
        helper = _Forked(_later_bench_rows, path, (split, size + 1), progress.for_helper())
        try:
            rows, entries, header = _bench_rows(path, (0, split), progress.for_this_process())
            bench.add(rows)
            del rows
            later, later_entries, header = helper.outcome(progress.refresh)
        except BaseException:
            helper.stop()
            raise
        builder = c_builder()
        bench.add(builder.rows_of(later) if builder is not None else [Row(*fields) for fields in later])
        entries.take(later_entries)
    else:
        rows, entries, header = _bench_rows(path, None, progress.for_this_process())
        bench.add(rows)
    if entries.has_repeat():
        raise NeedsWholeDumps(f"{path}: an entry name appears twice")
    return bench, header


def _holds_md5(rows: list[Row]) -> bool:
    """A tensor row with an md5 value (a plain value's md5 is the CRC of its text, made by the reader)."""
    return any(row.md5 and row.shown_dtype == "" for row in rows)


def _mode(npu_json: Path, bench: _BenchSide) -> str:
    """md5 where both dumps hold md5 values, as the in-memory compare decides: the NPU side's first block
    tells (a dump whose later blocks alone hold them is sent to the in-memory compare)."""
    if not bench.has_md5:
        return "statistics"
    for rows, _names in _row_blocks(block_reader.DumpStream(npu_json), None):
        return "md5" if _holds_md5(rows) else "statistics"
    return "statistics"


def _check_header(header: dict[str, Any], path: Path) -> None:
    if str(header.get("task", "")) == "tensor":
        raise NeedsWholeDumps(f"{path}: a tensor dump")


class _Matcher:
    """Pairs NPU rows with the bench side's, a block of whole calls at a time, as ``match_rows`` does."""

    def __init__(self, bench: _BenchSide, bench_header: dict[str, Any], mode: str = "statistics"):
        self.bench = bench
        self.mode = mode
        self.bench_header = bench_header
        self.matched = bytearray(len(bench.rows))
        self.unpaired: list[Row] = []  # bench rows set free by the structure check, listed last
        self.entries_seen = _NameHashes()

    def npu_pairs(self, path: Path, part: tuple[int, int] | None = None, progress: Counter | None = None
                  ) -> Iterator[list[tuple]]:  # fmt: skip
        reader = block_reader.DumpStream(path)
        bench, matched, first_of = self.bench, self.matched, self.bench.first_of
        for rows, names in _row_blocks(reader, part):
            _check_header(reader.header, path)
            if str(reader.header.get("framework", "")) != str(self.bench_header.get("framework", "")):
                raise NeedsWholeDumps("the dumps come from different frameworks: their names are mapped")
            if OP_LOG_LEVEL in (reader.header.get("level"), self.bench_header.get("level")):
                raise NeedsWholeDumps("op logs are matched in passes over both whole")
            self.entries_seen.add(names)
            if self.mode != "md5" and bench.has_md5 and _holds_md5(rows):
                raise NeedsWholeDumps("md5 values past the NPU dump's first block: its mode was chosen there")
            if (builder := c_builder()) is not None:
                pairs, unpaired = builder.pair_calls(
                    rows, first_of, matched, bench.rows, bench.call_starts, bench.call_ends, same_structure
                )
            else:
                pairs, unpaired = self._paired(rows)
            self.unpaired.extend(unpaired)
            yield pairs
            if progress is not None:
                progress(reader.parsed_bytes)
        _check_header(reader.header, path)  # fields written after data
        if self.entries_seen.has_repeat():
            raise NeedsWholeDumps(f"{path}: an entry name appears twice")

    def _paired(self, rows: list[Row]) -> tuple[list[tuple[Row, Row | None]], list[Row]]:
        """The C builder's ``pair_calls``, in Python."""
        bench, matched, first_of = self.bench, self.matched, self.bench.first_of
        pairs: list[tuple[Row, Row | None]] = []
        for row in rows:
            index = first_of.get(row.name)
            if index is None or matched[index]:
                pairs.append((row, None))
            else:
                matched[index] = 1
                pairs.append((row, bench.rows[index]))
        return calls_of_one_structure(pairs, bench)  # type: ignore[arg-type,return-value]

    def later_part(self, outcome: _PartOutcome) -> None:
        """Take in what a helper matched on the later part of the NPU dump."""
        mine = np.frombuffer(self.matched, dtype=np.uint8)
        theirs = np.frombuffer(outcome.matched, dtype=np.uint8)
        self.entries_seen.take(outcome.entries)
        if np.any(mine & theirs) or self.entries_seen.has_repeat():
            raise NeedsWholeDumps("a name appears in both halves of the NPU dump")
        self.matched = bytearray(mine | theirs)
        self.unpaired.extend(outcome.unpaired)

    def bench_only(self, size: int) -> Iterator[list[tuple[Row | None, Row | None]]]:
        """Bench values no NPU value took, in bench order, then those the structure check set free."""
        pairs: list[tuple[Row | None, Row | None]] = []
        for index in self.bench.first_of.values():
            if not self.matched[index]:
                pairs.append((None, self.bench.rows[index]))
                if len(pairs) >= size:
                    yield pairs
                    pairs = []
        pairs.extend((None, row) for row in self.unpaired)
        if pairs:
            yield pairs


BENCH_ONLY_BLOCK = 50_000
HELPER_FROM_BYTES = 32 << 20  # an NPU dump.json smaller than this is not worth a second process
MAIN_SHARE = 0.5  # of the NPU dump.json, by bytes: this process's part; the helper compares the rest


@dataclass
class _PartOutcome:
    """What the helper process sends back for the later half of the NPU dump."""

    counts: CompareCounts
    matched: bytes
    unpaired: list[Row]
    entries: _NameHashes


def _later_half(matcher: _Matcher, npu_json: Path, part: tuple[int, int], part_file: Path,
                metrics: Sequence[Any], stacks: Dump | None, progress: Counter,
                sheet_part: Path | None = None, styles: dict[str, int] | None = None) -> _PartOutcome:  # fmt: skip
    """The helper's share: the later half of the NPU dump, its CSV rows to ``part_file`` and, when the compare
    writes an xlsx, its sheet rows to ``sheet_part`` (both made, private, by the parent: opened here without
    following a link and without creating anything)."""
    with _open_part(part_file) as handle, _open_part(sheet_part) as sheet:
        rows = SheetRows(sheet, styles or {}) if sheet is not None else None
        blocks = TableBlocks(matcher.mode, metrics, stacks)
        blocks.add(matcher.npu_pairs(npu_json, part, progress), CsvTableWriter(handle, None), rows)
    return _PartOutcome(blocks.counts, bytes(matcher.matched), matcher.unpaired, matcher.entries_seen)


def _open_part(path: Path | None) -> Any:
    if path is None:
        return contextlib.nullcontext()
    return os.fdopen(os.open(path, os.O_WRONLY | os.O_TRUNC | getattr(os, "O_NOFOLLOW", 0)), "wb")


def _run_forked(connection: Any, target: Any, args: tuple) -> None:
    try:
        connection.send(("done", target(*args)))
    except BaseException as exc:  # the parent raises it
        connection.send(("error", exc))
    finally:
        connection.close()


class _Forked:
    """``target(*args)`` in a forked process (which shares this one's memory as it was), while this one works
    on; ``outcome()`` waits for its return value or raises its exception."""

    def __init__(self, target: Any, *args: Any, leaves: Sequence[Path] = ()):
        import multiprocessing

        context = multiprocessing.get_context("fork")
        self._receive, send = context.Pipe(duplex=False)
        self.leaves = list(leaves)  # files it writes, removed when it is stopped
        self._process = context.Process(target=_run_forked, args=(send, target, args), daemon=True)
        self._process.start()
        send.close()

    def outcome(self, waiting: Callable[[], None] | None = None) -> Any:
        """Its result; ``waiting`` is called now and then until it comes."""
        try:
            while waiting is not None and not self._receive.poll(0.25):
                waiting()
            kind, value = self._receive.recv()
            if waiting is not None:
                waiting()
        except EOFError:
            raise MsprobeError("the compare's helper process ended without a result") from None
        finally:
            self._process.join()
        if kind == "error":
            raise value
        return value

    def stop(self) -> None:
        if self._process.is_alive():
            self._process.kill()
        self._process.join()
        for leaf in self.leaves:
            leaf.unlink(missing_ok=True)


def _append(source: Any, target: Any) -> None:
    """The helper's rows after this process's, copied by the kernel where it can."""
    target.flush()
    try:
        size, offset = os.fstat(source.fileno()).st_size, 0
        while offset < size:
            offset += os.sendfile(target.fileno(), source.fileno(), offset, size - offset)
        target.seek(0, os.SEEK_END)
    except OSError:  # a file system without sendfile between files
        source.seek(0)
        target.seek(0, os.SEEK_END)
        shutil.copyfileobj(source, target, 1 << 20)


def _can_fork() -> bool:
    """A second process is worth it and safe: two cores or more, Linux, and a process of one thread (besides
    tqdm's monitor) that is no worker of a pool (a multi-rank compare already runs a process per pair)."""
    import multiprocessing
    import threading

    return (
        (os.cpu_count() or 1) >= 2
        and sys.platform.startswith("linux")
        and "fork" in multiprocessing.get_all_start_methods()
        and multiprocessing.parent_process() is None
        # tqdm's monitor thread (our progress bar starts it) only sleeps and looks at bars: a fork leaves it behind
        and all(type(thread).__name__ == "TMonitor" for thread in threading.enumerate()[1:])
    )


def compare_blockwise(
    npu_json: Path,
    bench_json: Path,
    output_dir: Path,
    stamp: str,
    prefix: str,
    stack_mode: bool | Path,
    metrics: Sequence[Any],
    processes: int = 2,
) -> CompareCounts:
    """Compare two statistics (or md5) dumps block by block and write the result files; NeedsWholeDumps when the pair
    needs the in-memory compare (nothing is left behind then). With ``processes`` 2, a forked helper compares
    the later half of the NPU dump; its CSV rows and sheet rows are put after this process's. A progress bar counts
    the bytes of both files read, on a terminal."""
    from msprobe.core.compare.tables import STACK_COLUMN

    with Progress(npu_json.stat().st_size + bench_json.stat().st_size) as progress:
        bench, bench_header = _read_bench(bench_json, processes, progress)
        stacks = Dump.from_header(npu_json, {}, {}) if stack_mode else None
        if stacks is not None:
            stacks.stack = read_stack_file(stack_mode) if isinstance(stack_mode, Path) else read_stacks(npu_json.parent)
        mode = _mode(npu_json, bench)
        served = [metric for metric in metrics if metric.serves("statistics")]
        columns = MD5_COLUMNS if mode == "md5" else with_plugin_columns(STATISTICS_COLUMNS, served)
        columns = columns + ([STACK_COLUMN] if stack_mode else [])
        matcher = _Matcher(bench, bench_header, mode)
        size = npu_json.stat().st_size
        split = int(size * MAIN_SHARE)
        helper = sheet_part = None
        # every bench name gets a row: past Excel's limit already, the xlsx is not begun
        with_xlsx = len(bench.first_of) <= XLSX_ROW_LIMIT
        with ResultFiles(output_dir, prefix, stamp, columns, with_xlsx) as files:
            xlsx, csv_path = files.xlsx, files.csv_path
            try:
                if processes > 1 and size >= HELPER_FROM_BYTES and _can_fork():
                    part_fd, part_file = create_private(csv_path.with_name(f"{csv_path.name}.part"))
                    os.close(part_fd)
                    if xlsx is not None:  # the helper's sheet rows too, numbered from 1, put after ours at the end
                        sheet_fd, sheet_part = create_private(csv_path.with_name(f"{csv_path.name}.sheet"))
                        os.close(sheet_fd)
                    styles = xlsx.styles if xlsx is not None else None
                    helper = _Forked(_later_half, matcher, npu_json, (split, size + 1), part_file, metrics, stacks,
                                     progress.for_helper(), sheet_part, styles,
                                     leaves=[p for p in (part_file, sheet_part) if p is not None])  # fmt: skip
                blocks = TableBlocks(mode, metrics, stacks)
                part = (0, split) if helper is not None else None
                blocks.add(matcher.npu_pairs(npu_json, part, progress.for_this_process()), files.writer, xlsx)
                if helper is not None:
                    outcome = helper.outcome(progress.refresh)
                    matcher.later_part(outcome)
                    blocks.take(outcome.counts)
                    files.csv.flush()
                    with open(part_file, "rb") as part:
                        _append(part, files.csv)
                    part_file.unlink()
                    if sheet_part is not None:
                        xlsx.append_rows(sheet_part, outcome.counts.rows)
                        sheet_part.unlink()
                blocks.add(matcher.bench_only(BENCH_ONLY_BLOCK), files.writer, xlsx)
            except BaseException:
                if helper is not None:
                    helper.stop()
                raise
            blocks.counts.files = files.finish()
        return blocks.counts
