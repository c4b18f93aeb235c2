"""compare_result_*.xlsx, fast: the sheet's rows are made as XML text a block at a time (in C where msprobe-core
was built with it), and everything else in the file (styles, workbook, properties) by XlsxWriter.

XlsxWriter alone spends about 15 us a cell in Python, several times the whole compare. The rows here follow its
constant-memory writer cell for cell: inf and nan as the text ``"inf\\t"``, text as an inline string with
Excel's ``_xHHHH_`` escapes and cut at 32767 UTF-16 units, no element for an empty cell without a style. Three
differences, all in the user's favour: a number is written as ``repr`` writes it (its exact value, as in the
CSV; XlsxWriter's 16 digits can miss the last bit), text that looks like a URL stays text, and a row with an
over-long cell keeps the cells after it (XlsxWriter drops them).
"""

from __future__ import annotations

import io
import math
import os
import re
import tempfile
import zipfile
from pathlib import Path
from typing import Any

import pandas as pd

from msprobe.core import spreadsheet
from msprobe.core.compare.zipping import DeflatedPart, ZipWriter, crc32_combine, deflate_bytes
from msprobe.core.errors import DataFileError
from msprobe.core.files import create_private
from msprobe.core.spreadsheet import TableColumns, table_columns

XLSX_ROW_LIMIT = 1_048_575
FILLS = {"red": "FFFF0000", "yellow": "FFFFFF00"}
SHEET = "xl/worksheets/sheet1.xml"


class XlsxStream:
    """compare_result_*.xlsx written a block of rows at a time, suspicious rows coloured; memory stays flat (the
    rows wait, deflated as they come, in a temporary file until the package is put together). Past Excel's row
    limit the file is given up: the CSV has everything."""

    def __init__(self, path: Path, columns: list[str]):
        self.path = path
        self.columns = list(columns)
        self.rows = 0
        fd, self.temporary = create_private(path)  # the package goes through our handle, never by a name
        self._handle = os.fdopen(fd, "wb")
        self._rows_file = tempfile.TemporaryFile(dir=path.parent)
        self._rows_text = DeflatedPart(self._rows_file)
        try:
            self._template, self._styles = _template(self.columns)
        except Exception as exc:  # XlsxWriter's own temporary files, on a full disk or past a file-size limit
            self.discard()
            raise _cannot_write(path, exc) from None

    @property
    def full(self) -> bool:
        return self.rows > XLSX_ROW_LIMIT

    @property
    def styles(self) -> dict[str, int]:
        """The style index of each fill, for a :class:`SheetRows` writing part of this sheet elsewhere."""
        return dict(self._styles)

    def add_table(self, table: pd.DataFrame, highlight: dict[int, str], columns: TableColumns | None = None) -> None:
        """A block of the table; ``highlight`` keyed by row position in ``table``; ``columns``: the table's, made
        already by :func:`~msprobe.core.spreadsheet.table_columns` (for its CSV)."""
        if self.full or table.empty:
            return
        count = len(table)
        keep = min(count, XLSX_ROW_LIMIT + 1 - self.rows)
        if keep < count:  # the file is given up at close; the rows past the limit need no text
            table, columns = table.iloc[:keep], None
        self._rows_text.write(_table_rows(table, highlight, columns, self.rows + 2, self._styles))  # 1: the header
        self.rows += count

    def append_rows(self, part: Path, count: int) -> None:
        """``count`` rows a :class:`SheetRows` wrote to ``part`` (numbered from 1), put after the rows so far."""
        if not self.full and self.rows + count <= XLSX_ROW_LIMIT:
            with open(part, "rb") as source:
                carry = b""
                while chunk := source.read(1 << 22):
                    whole, carry = _split_after_last_row(carry + chunk)
                    self._rows_text.write(shift_rows(whole, self.rows + 1))
                self._rows_text.write(shift_rows(carry, self.rows + 1))
        self.rows += count

    def close(self) -> Path | None:
        """The finished file, or None (and nothing left behind) when the table had too many rows."""
        try:
            if not self.full:
                self._rows_text.end()
                self._rows_file.seek(0)
                _assemble(
                    self._handle, self._template, (self._rows_text, self._rows_file), self.rows, len(self.columns)
                )
            self._handle.close()
        except OSError as exc:
            self.discard()
            raise _cannot_write(self.path, exc) from None
        except BaseException:
            self.discard()
            raise
        finally:
            self._rows_file.close()
        if self.full:
            self.temporary.unlink(missing_ok=True)
            return None
        from msprobe.core.compare.report import replace_file

        return replace_file(self.temporary, self.path)

    def discard(self) -> None:
        """Nothing left behind: the compare failed part way."""
        self._rows_file.close()
        self._handle.close()
        self.temporary.unlink(missing_ok=True)


class SheetRows:
    """Rows of a sheet, numbered from 1, written to ``handle`` for :meth:`XlsxStream.append_rows`: a forked
    helper process's share of the table (it compares the later half of the NPU dump)."""

    def __init__(self, handle: Any, styles: dict[str, int]):
        self._handle, self._styles, self.rows = handle, styles, 0

    def add_table(self, table: pd.DataFrame, highlight: dict[int, str], columns: TableColumns | None = None) -> None:
        if table.empty:
            return
        self._handle.write(_table_rows(table, highlight, columns, self.rows + 1, self._styles))
        self.rows += len(table)


def _table_rows(
    table: pd.DataFrame, highlight: dict[int, str], columns: TableColumns | None, first_row: int, fills: dict[str, int]
) -> bytes:
    """A table block's sheet rows from ``first_row`` on, each highlighted row in its fill's style."""
    columns = columns or table_columns(table)
    styles = [fills.get(highlight.get(index, ""), 0) for index in range(len(table))]
    return sheet_rows(columns.values, first_row, styles, columns.packed)


def _split_after_last_row(data: bytes) -> tuple[bytes, bytes]:
    end = data.rfind(b"</row>")
    return (data[: end + 6], data[end + 6 :]) if end >= 0 else (b"", data)


def shift_rows(text: bytes, offset: int) -> bytes:
    """``sheet_rows``' text with every row number raised by ``offset``."""
    if spreadsheet.c_text is not None:
        return spreadsheet.c_text.shift_rows(text, offset)
    return _ROW_NUMBER.sub(lambda match: match.group(1) + str(int(match.group(2)) + offset).encode(), text)


_ROW_NUMBER = re.compile(rb'(<row r="|<c r="[A-Z]*)([0-9]+)(?=")')


def _cannot_write(path: Path, exc: Exception) -> Exception:
    """The error of a write that failed, with the result file's name (the system's error has none, or that of a
    temporary file)."""
    if isinstance(exc, DataFileError) or (not isinstance(exc, OSError) and type(exc).__name__ != "FileCreateError"):
        return exc
    reason = exc.strerror if isinstance(exc, OSError) and exc.strerror else str(exc).split("] ")[-1]
    return DataFileError(path, f"cannot be written ({reason})")


def _template(columns: list[str]) -> tuple[bytes, dict[str, int]]:
    """An xlsx holding only the bold header row, made by XlsxWriter, and the style index of each fill."""
    import xlsxwriter

    buffer = io.BytesIO()
    # in memory: one header row needs no temporary files of XlsxWriter's
    workbook = xlsxwriter.Workbook(buffer, {"in_memory": True, "strings_to_formulas": False})
    sheet = workbook.add_worksheet("Sheet")
    sheet.write_row(0, 0, columns, workbook.add_format({"bold": True}))
    fills = {color: workbook.add_format({"bg_color": "#" + argb[2:]}) for color, argb in FILLS.items()}
    styles = {color: fill._get_xf_index() for color, fill in fills.items()}  # given before close: then written
    workbook.close()
    return buffer.getvalue(), styles


def _column_letters(index: int) -> str:
    letters = ""
    index += 1
    while index:
        index, rest = divmod(index - 1, 26)
        letters = chr(ord("A") + rest) + letters
    return letters


def _assemble(handle: Any, template: bytes, rows: tuple[DeflatedPart, Any], count: int, width: int) -> None:
    """The template's package with the rows (deflated already, and their file) put into its sheet after the
    header, and the sheet's extent set."""
    last = f"{_column_letters(max(width, 1) - 1)}{count + 1}"
    part, rows_file = rows
    archive = ZipWriter(handle)
    with zipfile.ZipFile(io.BytesIO(template)) as source:
        for info in source.infolist():
            data = source.read(info.filename)
            if info.filename != SHEET:
                archive.add(info.filename, data)
                continue
            text = data.decode("utf-8")
            text = re.sub(r'<dimension ref="[^"]*"/>', f'<dimension ref="A1:{last}"/>', text, count=1)
            head, tail = (piece.encode("utf-8") for piece in text.split("</sheetData>", 1))
            tail = b"</sheetData>" + tail
            head_deflated, head_crc = deflate_bytes(head, last=False)
            tail_deflated, tail_crc = deflate_bytes(tail, last=True)
            crc = crc32_combine(crc32_combine(head_crc, part.crc, part.size), tail_crc, len(tail))
            archive.add_deflated(
                SHEET, [head_deflated, rows_file, tail_deflated], crc, len(head) + part.size + len(tail)
            )
    archive.close()


def sheet_rows(columns: list[list], first_row: int, styles: list[int], packed: list[Any] | None = None) -> bytes:
    """``<row>`` elements for rows ``first_row``... (1-based) of equal-length column lists; ``styles[r]`` is row
    r's cell style index, 0 for none. ``packed``: per column of floats only, its text in one piece (see
    ``packed_float_texts``), so that the C helper makes no float's text itself."""
    if spreadsheet.c_text is None:
        return python_sheet_rows(columns, first_row, styles)
    packed = packed or [None] * len(columns)
    return spreadsheet.c_text.sheet_rows(
        [p if p is not None else v for v, p in zip(columns, packed)], first_row, styles
    )


_ESCAPED_ESCAPE = re.compile("(_x[0-9a-fA-F]{4}_)")
_CONTROL = re.compile("([\x00-\x08\x0b-\x1f\ufffe\uffff])")
_SURROGATE = re.compile("[\ud800-\udfff]")
_STRING_UNITS = 32767


def python_sheet_rows(columns: list[list], first_row: int, styles: list[int]) -> bytes:
    """The rules of the C ``sheet_rows``, in Python (the fallback, and the tests' second opinion)."""
    letters = [_column_letters(index) for index in range(len(columns))]
    out: list[str] = []
    for offset, (style, row) in enumerate(zip(styles, zip(*columns) if columns else [() for _ in styles])):
        number = first_row + offset
        cells = [_cell(f"{letter}{number}", style, value) for letter, value in zip(letters, row)]
        cells = [cell for cell in cells if cell]
        if cells:
            out.append(f'<row r="{number}">{"".join(cells)}</row>')
    return "".join(out).encode("utf-8")


def _cell(reference: str, style: int, value: Any) -> str:
    start = f'<c r="{reference}" s="{style}"' if style else f'<c r="{reference}"'
    if isinstance(value, bool):
        return f'{start} t="b"><v>{int(value)}</v></c>'
    if isinstance(value, int):
        return f"{start}><v>{int(value)}</v></c>"
    if isinstance(value, float):
        if math.isfinite(value):
            return f"{start}><v>{float(value)!r}</v></c>"
        value = "nan\t" if math.isnan(value) else ("inf\t" if value > 0 else "-inf\t")
    if value is None or value == "":
        return f"{start}/>" if style else ""
    if not isinstance(value, str):
        try:
            return _cell(reference, style, float(value))
        except (TypeError, ValueError):
            return _cell(reference, style, str(value))
    text = _cut(value)
    text = _ESCAPED_ESCAPE.sub(r"_x005F\1", text)
    text = _CONTROL.sub(lambda match: f"_x{ord(match.group(1)):04X}_", text)
    preserve = ' xml:space="preserve"' if text[:1].isspace() or text[-1:].isspace() else ""
    text = text.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")
    text = _SURROGATE.sub("\ufffd", text)  # a lone surrogate (from a JSON "\ud800") is no UTF-8
    return f'{start} t="inlineStr"><is><t{preserve}>{text}</t></is></c>'


def _cut(text: str) -> str:
    if len(text) <= _STRING_UNITS // 2:
        return text
    units = 0
    for index, char in enumerate(text):
        units += 2 if ord(char) > 0xFFFF else 1
        if units > _STRING_UNITS:
            return text[:index]
    return text
