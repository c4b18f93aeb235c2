"""Result tables that a spreadsheet opens as data, never as formulas.

API names, stack lines and messages come from dump files other people
wrote: a cell such as ``=HYPERLINK(...)`` or ``=cmd|' /C calc'!A0`` would
run when the CSV is opened. Text that starts with ``=``, ``+``, ``-``,
``@``, a tab or a carriage return gets a leading ``'`` (what spreadsheet
applications take as "text follows"), unless it reads as a number
(``-0.5``, ``-inf``), which stays as it is; numbers stay numbers. A NUL
character, which Python 3.10's csv module cannot write and spreadsheets
drop, is written as the text ``\\x00``.
"""

from __future__ import annotations

import csv
import io
import math
import re
from collections.abc import Iterable
from typing import IO, Any, NamedTuple

import pandas as pd

from msprobe.core.floattext import float_texts, packed_float_texts
from msprobe.core.switches import built_extension

try:
    from msprobe.core import _celltext as c_text
except ImportError:  # built without a C compiler: the same text, made in Python
    c_text = None
c_text = built_extension(c_text, 1, "msprobe.core._celltext")
# c_text: the C text maker of the CSV and the xlsx rows, or None; the one switch (tests set it to None)

_TRIGGERS = ("=", "+", "-", "@", "\t", "\r")


def _reads_as_number(text: str) -> bool:
    try:
        float(text)
    except ValueError:
        return False
    return True


def safe_cell(value: Any) -> Any:
    if not isinstance(value, str):
        return value
    if "\x00" in value:
        value = value.replace("\x00", "\\x00")
    if value.startswith(_TRIGGERS) and not _reads_as_number(value):
        return "'" + value
    return value


_TRIGGER_STARTS = frozenset(_TRIGGERS)


def csv_cell(value: Any) -> Any:
    """A cell as ``safe_table(table).to_csv()`` writes it: safe text, and nothing for a missing value."""
    if isinstance(value, str):
        return safe_cell(value) if value[:1] in _TRIGGER_STARTS or "\x00" in value else value
    if isinstance(value, float):
        return "" if math.isnan(value) else value
    return "" if value is None else value


_TRIGGER_AFTER_SEPARATOR = re.compile("\x01[=+\\-@\t\r]")


def _csv_column(column: list[Any]) -> list[str]:
    """One column's cells as ``csv.writer`` writes what :func:`csv_cell` makes of them: floats as ``repr``
    (made in bulk), text quoted where it holds a comma, a quote or a line break."""
    kinds = set(map(type, column))
    if kinds <= {float}:
        return _blank_nan(float_texts(column))  # digits never need quotes
    if kinds <= {str}:
        joined = "\x01" + "\x01".join(column)
        if "\x00" in joined or _TRIGGER_AFTER_SEPARATOR.search(joined):
            column = [csv_cell(value) for value in column]
        return _quoted(column)
    cells = list(column)
    for index, value in enumerate(column):
        kind = type(value)
        if kind is str:
            if value[:1] in _TRIGGER_STARTS or "\x00" in value:
                cells[index] = safe_cell(value)
        elif kind is not float:
            cells[index] = str(csv_cell(value))
    return _quoted(_floats_put_as_text(column, cells, ""))


class TableColumns(NamedTuple):
    """A table block's columns as lists, each column of floats only also packed (see ``packed_float_texts``):
    made once for the CSV and the xlsx of the same block."""

    values: list[list[Any]]
    packed: list[Any]  # per column: packed_float_texts' answer, or None


def table_columns(table: pd.DataFrame) -> TableColumns:
    values = [table[column].tolist() for column in table.columns]
    packed = [packed_float_texts(v) if v and set(map(type, v)) <= {float} else None for v in values]
    return TableColumns(values, packed)


def _floats_as_text(column: list[Any], packed: Any = False) -> tuple[Any, bool]:
    """The column for the C helper with its floats as text (made in bulk, faster than its repr), and whether
    that text is all the column holds (then it needs no quoting nor making safe). A column of floats only is
    passed packed: orjson's text as it is, with repr's where they differ (``packed``: made already)."""
    kinds = set(map(type, column))
    if kinds <= {float}:
        packed = packed_float_texts(column) if packed is False else packed
        if packed is not None:
            texts, count, fixed, fixes = packed
            return (texts, count, fixed, ["" if text == "nan" else text for text in fixes]), True
        return _blank_nan(float_texts(column)), True
    if float not in kinds:
        return column, False
    return _floats_put_as_text(column, list(column), None), False


def _floats_put_as_text(column: list[Any], cells: list[Any], nan: Any) -> list[Any]:
    """``cells`` with the text of the column's floats in their places (made in bulk), ``nan`` for a NaN."""
    floats_at = [index for index, value in enumerate(column) if type(value) is float]
    for index, text in zip(floats_at, float_texts([column[index] for index in floats_at])):
        cells[index] = nan if text == "nan" else text
    return cells


def _blank_nan(texts: list[str]) -> list[str]:
    """pandas writes nothing for a NaN."""
    if "nan" in texts:
        return ["" if text == "nan" else text for text in texts]
    return texts


# A cell holding a carriage return is quoted, always. Some versions of Python's csv module leave it bare when
# rows end in "\n" (as pandas' to_csv writes them); every reader (csv.reader, pandas, a spreadsheet) then ends
# the row there, and what follows the return, "=cmd|..." say, starts a row of its own, its formula unescaped.
_QUOTES_CR = True
_QUOTED_CHARACTERS = (",", '"', "\n", "\r")


def _quoted(texts: list[str]) -> list[str]:
    joined = "".join(texts)
    if not any(character in joined for character in _QUOTED_CHARACTERS):
        return texts
    quoted = {
        text: '"' + text.replace('"', '""') + '"'
        if any(character in text for character in _QUOTED_CHARACTERS)
        else text
        for text in set(texts)
    }  # once per distinct text: a column of shapes holds few
    return [quoted[text] for text in texts]


class CsvTableWriter:
    """Writes tables to one CSV file (opened in binary mode), as pandas' ``to_csv(index=False)`` writes them
    made safe, a table (or a block of one) at a time. With the C helper the text is made in one loop;
    ``csv.writer`` and pandas take several times longer on a table of millions of rows."""

    def __init__(self, handle: IO[bytes], columns: Iterable[str] | None):
        """``columns`` None: no header (the rest of a file another writer began)."""
        self._handle = handle
        if columns is not None:
            header = io.StringIO()
            csv.writer(header, lineterminator="\n").writerow([str(column) for column in columns])
            handle.write(header.getvalue().encode("utf-8"))

    def write(self, table: pd.DataFrame, columns: TableColumns | None = None) -> None:
        """``columns``: the table's, made already by :func:`table_columns`."""
        if table.empty:
            return
        if len(table.columns) == 1:  # csv.writer's own rule for a row of one empty cell: leave it to it
            text = io.StringIO()
            rows = SafeWriter(text, lineterminator="\n")
            rows.writerows([value] for value in table.iloc[:, 0].tolist())
            self._handle.write(text.getvalue().encode("utf-8"))
            return
        if c_text is not None:
            columns = columns or TableColumns([table[c].tolist() for c in table.columns], [False] * len(table.columns))
            texts, raw = zip(*(_floats_as_text(v, p) for v, p in zip(columns.values, columns.packed)))
            self._handle.write(c_text.lines(list(texts), list(raw), _QUOTES_CR))
            return
        columns = [_csv_column(table[column].tolist()) for column in table.columns]
        self._handle.write(("\n".join(map(",".join, zip(*columns))) + "\n").encode("utf-8"))


def write_csv_table(handle: IO[bytes], table: pd.DataFrame) -> None:
    """The CSV pandas' ``to_csv(index=False)`` writes for the table, made safe."""
    CsvTableWriter(handle, table.columns).write(table)


def safe_table(table: pd.DataFrame) -> pd.DataFrame:
    """A copy with every text cell made safe (only text columns are looked at)."""
    safe = table.copy()
    for column in safe.columns:
        if safe[column].dtype == object or pd.api.types.is_string_dtype(safe[column]):
            safe[column] = [safe_cell(value) for value in safe[column]]
    return safe


class SafeWriter:
    """``csv.writer`` whose rows are made safe cell by cell."""

    def __init__(self, handle: IO[str], **options: Any):
        self._writer = csv.writer(handle, **options)
        self._handle = handle
        self._end = self._writer.dialect.lineterminator

    def writerow(self, row: Iterable[Any]) -> Any:
        cells = [safe_cell(value) for value in row]
        if any(isinstance(cell, str) and "\r" in cell for cell in cells):  # quoted, whatever csv would do
            texts = ["" if cell is None else cell if isinstance(cell, str) else repr(cell) for cell in cells]
            return self._handle.write(",".join(_quoted(texts)) + self._end)
        return self._writer.writerow(cells)

    def write_header(self, columns: Iterable[str]) -> Any:
        """The tool's own column names, as the reference spells them (grad probe's "=0"): written as they are."""
        return self._writer.writerow(columns)

    def writerows(self, rows: Iterable[Iterable[Any]]) -> None:
        for row in rows:
            self.writerow(row)


def writer(handle: IO[str], **options: Any) -> SafeWriter:
    return SafeWriter(handle, **options)
