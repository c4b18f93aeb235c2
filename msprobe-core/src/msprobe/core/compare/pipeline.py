"""The compare's one pipeline: matched pairs in, the result files out, a block of whole calls at a time.

The in-memory compare (:func:`compare_in_memory`) matches the two dumps whole,
with fuzzy matching and name mappings where asked, and passes every pair as
one block; the large-dump compare (large.py) reads the NPU dump a block of
calls at a time and passes each block as it goes. Either way a block is
tabled (tables.py), highlighted, counted and written to the CSV and the
xlsx here, so both give the same files: every rule is local to one call.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pandas as pd

from msprobe.core.compare.highlight import failing_rows
from msprobe.core.compare.metrics import NA
from msprobe.core.compare.oplog import OP_LOG_LEVEL, op_log_mapping
from msprobe.core.compare.report import replace_file
from msprobe.core.compare.rows import Row, dump_rows
from msprobe.core.compare.tables import (
    CompareResult,
    TensorLoader,
    default_metrics,
    detect_mode,
    finish_table,
    match_rows,
    md5_table,
    statistics_table,
    tensor_table,
)
from msprobe.core.compare.xlsx import XLSX_ROW_LIMIT, XlsxStream
from msprobe.core.dump.reader import Dump
from msprobe.core.files import create_private, make_dir
from msprobe.core.spreadsheet import CsvTableWriter, table_columns

Pairs = list[tuple[Row | None, Row | None]]


@dataclass
class CompareCounts:
    """What a compare wrote: its mode, its rows, the suspicious and unmatched among them, and its files."""

    mode: str = "statistics"  # "md5" when both dumps hold md5 values, "tensor" when both hold tensor files
    rows: int = 0
    suspicious: int = 0
    unmatched: int = 0
    files: list[Path] = field(default_factory=list)


@dataclass
class TensorSource:
    """Where the tensor mode reads each pair's two tensors from."""

    npu: Dump
    bench: Dump
    load: TensorLoader


class TableBlocks:
    """Tables a block of pairs at a time: made, highlighted, counted and written."""

    def __init__(
        self, mode: str, metrics: Sequence[Any], stacks: Dump | None, tensors: TensorSource | None = None
    ) -> None:
        self.mode, self.metrics, self.stacks, self.tensors = mode, metrics, stacks, tensors
        self.counts = CompareCounts(mode)

    def table(self, pairs: Pairs) -> tuple[pd.DataFrame, dict[int, str]]:
        """One block's table, with its stack column and highlighting messages, and the rows to colour."""
        if self.mode == "tensor" and self.tensors is not None:
            tensors = self.tensors
            table = tensor_table(pairs, tensors.npu, tensors.bench, tensors.load, self.metrics)
        elif self.mode == "md5":
            table = md5_table(pairs)
        else:
            table = statistics_table(pairs, self.metrics)
        return table, finish_table(self.mode, table, pairs, self.stacks)

    def write(self, table: pd.DataFrame, marks: dict[int, str], writer: CsvTableWriter, xlsx: Any) -> None:
        """Count the block's rows and write them to the CSV and, when one is written, the xlsx (or its rows)."""
        counts = self.counts
        counts.rows += len(table)
        counts.unmatched += table["NPU Name"].tolist().count(NA) + table["Bench Name"].tolist().count(NA)
        counts.suspicious += int(failing_rows(self.mode, table).sum())
        columns = table_columns(table) if xlsx is not None else None  # made once for both files
        writer.write(table, columns)
        if xlsx is not None:
            xlsx.add_table(table, marks, columns)

    def add(self, blocks: Iterable[Pairs], writer: CsvTableWriter, xlsx: Any) -> None:
        for pairs in blocks:
            self.write(*self.table(pairs), writer, xlsx)

    def take(self, other: CompareCounts) -> None:
        """Add another process's counts for its share of the same compare."""
        self.counts.rows += other.rows
        self.counts.unmatched += other.unmatched
        self.counts.suspicious += other.suspicious


class ResultFiles:
    """The CSV and the xlsx of one compare, written under private temporary names and renamed only when whole.

    A compare that fails part way leaves neither behind, and removes the
    output folder again when it made it (and nothing else was put there).
    """

    def __init__(self, output_dir: Path, prefix: str, stamp: str, columns: Sequence[str], with_xlsx: bool):
        self.output_dir = output_dir
        self.created = not output_dir.exists()
        make_dir(output_dir)
        self.csv_path = output_dir / f"{prefix}_{stamp}.csv"
        descriptor, self.csv_temporary = create_private(self.csv_path)
        self.csv = os.fdopen(descriptor, "wb")
        self.xlsx: Any = None
        try:
            if with_xlsx:
                self.xlsx = XlsxStream(output_dir / f"{prefix}_{stamp}.xlsx", list(columns))
            self.writer = CsvTableWriter(self.csv, columns)
        except BaseException as failure:
            self.discard()
            self._name_the_file(failure)
            raise

    def finish(self) -> list[Path]:
        """Close and rename both files: the xlsx (when written and within Excel's limit), then the CSV."""
        self.csv.close()
        written = []
        if self.xlsx is not None:
            done = self.xlsx.close()
            if done is not None:
                written.append(done)
        written.append(replace_file(self.csv_temporary, self.csv_path))
        return written

    def discard(self) -> None:
        self.csv.close()
        self.csv_temporary.unlink(missing_ok=True)
        if self.xlsx is not None:
            self.xlsx.discard()
        if self.created:
            with contextlib.suppress(OSError):  # not empty: something else was put there meanwhile
                self.output_dir.rmdir()

    def __enter__(self) -> ResultFiles:
        return self

    def __exit__(self, kind: Any, exception: Any, _traceback: Any) -> None:
        if kind is None:
            return
        self.discard()
        self._name_the_file(exception)

    def _name_the_file(self, failure: BaseException) -> None:
        """A write that failed (a full disk) names no file: say which result could not be written."""
        if isinstance(failure, OSError) and failure.errno and not failure.filename:
            raise OSError(failure.errno, failure.strerror, str(self.csv_path)) from failure


def pair_dumps(
    npu: Dump, bench: Dump, fuzzy: bool = False, mapping: Callable[[str], str] | None = None
) -> tuple[Pairs, str]:
    """Every value of both dumps, matched (``fuzzy``: by occurrence instead of call count; ``mapping``: NPU
    names translated first), and the compare's mode."""
    npu_rows, bench_rows = dump_rows(npu, every_value=True), dump_rows(bench, every_value=True)
    op_logs = npu.level == bench.level == OP_LOG_LEVEL
    if mapping is None and op_logs:  # op streams that differ: matched in passes
        mapping = op_log_mapping(npu.data, bench.data)
    pairs = match_rows(npu_rows, bench_rows, fuzzy=fuzzy, mapping=mapping)
    # two op logs are mostly two ways of computing: checksums would only say "differs", statistics say how much
    return pairs, "statistics" if op_logs else detect_mode(npu_rows, bench_rows, npu, bench)


def _blocks_for(
    npu: Dump, bench: Dump, mode: str, stack: bool, load: TensorLoader | None, metrics: Sequence[Any]
) -> TableBlocks:
    if mode == "tensor" and load is None:
        mode = "statistics"  # no way to read the files: the statistics the dumps hold
    tensors = TensorSource(npu, bench, load) if mode == "tensor" and load is not None else None
    return TableBlocks(mode, metrics, npu if stack else None, tensors)


def compare_dumps(
    npu: Dump,
    bench: Dump,
    fuzzy: bool = False,
    stack: bool = False,
    load: TensorLoader | None = None,
    mapping: Callable[[str], str] | None = None,
    extra_metrics: Sequence[Any] = (),
    metrics: Sequence[Any] | None = None,
) -> CompareResult:
    """The compare table of two dumps, as one block, with no files written. ``metrics``: every metric column
    (the plugin registry's); ``None``: the built-in ones, plus ``extra_metrics``."""
    pairs, mode = pair_dumps(npu, bench, fuzzy, mapping)
    chosen = [*(default_metrics() if metrics is None else metrics), *extra_metrics]
    blocks = _blocks_for(npu, bench, mode, stack, load, chosen)
    table, marks = blocks.table(pairs)
    return CompareResult(blocks.mode, table, marks, npu, bench)


def compare_in_memory(
    npu: Dump,
    bench: Dump,
    output_dir: Path,
    stamp: str,
    prefix: str,
    fuzzy: bool = False,
    stack: bool = False,
    load: TensorLoader | None = None,
    mapping: Callable[[str], str] | None = None,
    metrics: Sequence[Any] | None = None,
) -> tuple[CompareCounts, CompareResult]:
    """Compare two dumps held whole, as one block, and write the result files; the counts (with the files) and
    the table."""
    result = compare_dumps(npu, bench, fuzzy, stack, load, mapping, metrics=metrics)
    table = result.table
    blocks = TableBlocks(result.mode, (), None)  # the one block is tabled: it is counted and written here
    with ResultFiles(output_dir, prefix, stamp, list(table.columns), len(table) <= XLSX_ROW_LIMIT) as files:
        blocks.write(table, result.highlight, files.writer, files.xlsx)
        blocks.counts.files = files.finish()
    return blocks.counts, result
