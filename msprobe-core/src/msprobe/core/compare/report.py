"""Result files: compare_result_{timestamp}.xlsx with highlighted rows, its .csv twin, advisor text.

Each file is written under a temporary name and renamed, so an interrupted
run never leaves a result that looks complete.
"""

from __future__ import annotations

import math
import os
import time
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import pandas as pd

from msprobe.core.compare.engine import CompareResult
from msprobe.core.dump.writer import create_private, make_dir, new_file
from msprobe.core.spreadsheet import write_csv_table

XLSX_ROW_LIMIT = 1_048_575
FILLS = {"red": "FFFF0000", "yellow": "FFFFFF00"}


def timestamp() -> str:
    return time.strftime("%Y%m%d%H%M%S")


def replace_file(temporary: Path, final: Path) -> Path:
    """A finished temporary (made by :func:`create_private`, its mode already set through its descriptor)
    renamed onto ``final``: a link planted at ``final`` is replaced, never written through."""
    os.replace(temporary, final)
    return final


def write_csv(table: pd.DataFrame, path: Path) -> Path:
    with new_file(path) as handle:
        write_csv_table(handle, table)
    return path


class XlsxStream:
    """compare_result_*.xlsx written a block of rows at a time with XlsxWriter's constant memory, suspicious
    rows coloured. inf and nan go in as the text "inf\t", "-inf\t", "nan\t", as the reference writes them (a
    cell cannot hold them as numbers). Past Excel's row limit the file is given up: the CSV has everything."""

    def __init__(self, path: Path, columns: list[str]):
        import xlsxwriter

        self.path = path
        self.rows = 0
        fd, self.temporary = create_private(path)  # XlsxWriter writes through our handle, never by a name
        self._handle = os.fdopen(fd, "w+b")
        try:
            self._begin(xlsxwriter, columns)
        except BaseException:
            self._handle.close()
            self.temporary.unlink(missing_ok=True)
            raise

    def _begin(self, xlsxwriter: Any, columns: list[str]) -> None:
        # text that looks like a formula (an API name from someone's dump.json) stays text
        self._workbook = xlsxwriter.Workbook(self._handle, {"constant_memory": True, "strings_to_formulas": False})
        self._sheet = self._workbook.add_worksheet("Sheet")
        self._sheet.write_row(0, 0, columns, self._workbook.add_format({"bold": True}))
        self._fills = {color: self._workbook.add_format({"bg_color": "#" + argb[2:]}) for color, argb in FILLS.items()}

    @property
    def full(self) -> bool:
        return self.rows > XLSX_ROW_LIMIT

    def add(self, rows: Iterable[tuple], highlight: dict[int, str]) -> None:
        """Rows in table order; ``highlight`` keyed by their position in ``rows``."""
        for index, row in enumerate(rows):
            self.rows += 1
            if self.full:
                return
            cells = [f"{v}\t" if isinstance(v, float) and not math.isfinite(v) else v for v in row]
            self._sheet.write_row(self.rows, 0, cells, self._fills.get(highlight.get(index, ""), None))

    def close(self) -> Path | None:
        """The finished file, or None (and nothing left behind) when the table had too many rows."""
        try:
            self._workbook.close()
            self._handle.close()
        except BaseException:
            self._handle.close()
            self.temporary.unlink(missing_ok=True)
            raise
        if self.full:
            self.temporary.unlink(missing_ok=True)
            return None
        return replace_file(self.temporary, self.path)

    def discard(self) -> None:
        """Nothing left behind: the compare failed part way."""
        try:
            self._workbook.close()
        finally:
            self._handle.close()
            self.temporary.unlink(missing_ok=True)


def write_xlsx(table: pd.DataFrame, highlight: dict[int, str], path: Path) -> Path | None:
    """The whole table at once; None when Excel cannot hold it (the CSV has everything)."""
    if len(table) > XLSX_ROW_LIMIT:
        return None
    stream = XlsxStream(path, list(table.columns))
    try:
        stream.add(table.itertuples(index=False, name=None), highlight)
    except BaseException:
        stream.discard()
        raise
    return stream.close()


def write_result(result: CompareResult, output_dir: Path, stamp: str, prefix: str = "compare_result") -> list[Path]:
    make_dir(output_dir)
    written = []
    xlsx = write_xlsx(result.table, result.highlight, output_dir / f"{prefix}_{stamp}.xlsx")
    if xlsx is not None:
        written.append(xlsx)
    written.append(write_csv(result.table, output_dir / f"{prefix}_{stamp}.csv"))
    return written
