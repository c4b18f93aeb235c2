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

import pandas as pd

from msprobe.core.compare.engine import CompareResult
from msprobe.core.dump.writer import make_dir, write_new_file
from msprobe.core.spreadsheet import write_csv_table

XLSX_ROW_LIMIT = 1_048_575
FILLS = {"red": "FFFF0000", "yellow": "FFFFFF00"}


def timestamp() -> str:
    return time.strftime("%Y%m%d%H%M%S")


def replace_file(temporary: Path, final: Path) -> Path:
    os.chmod(temporary, 0o640)
    os.replace(temporary, final)
    return final


def write_csv(table: pd.DataFrame, path: Path) -> Path:
    temporary = path.with_name(f".{path.name}.tmp")
    with open(temporary, "wb") as handle:
        write_csv_table(handle, table)
    return replace_file(temporary, path)


class XlsxStream:
    """compare_result_*.xlsx written a block of rows at a time with XlsxWriter's constant memory, suspicious
    rows coloured. inf and nan go in as the text "inf\t", "-inf\t", "nan\t", as the reference writes them (a
    cell cannot hold them as numbers). Past Excel's row limit the file is given up: the CSV has everything."""

    def __init__(self, path: Path, columns: list[str]):
        import xlsxwriter

        self.path = path
        self.rows = 0
        self.temporary = path.with_name(f".{path.name}.tmp.xlsx")
        # text that looks like a formula (an API name from someone's dump.json) stays text
        self._workbook = xlsxwriter.Workbook(
            str(self.temporary), {"constant_memory": True, "strings_to_formulas": False}
        )
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
        except BaseException:
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


def write_text(path: Path, text: str) -> Path:
    data = text.encode("utf-8")
    return write_new_file(path, lambda handle: handle.write(data))
