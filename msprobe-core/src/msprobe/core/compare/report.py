"""Result files: compare_result_{timestamp}.xlsx with highlighted rows, its .csv twin, advisor text.

Each file is written under a temporary name and renamed, so an interrupted
run never leaves a result that looks complete.
"""

from __future__ import annotations

import os
import time
from pathlib import Path

import pandas as pd

from msprobe.core.compare.engine import CompareResult
from msprobe.core.dump.writer import make_dir, write_new_file
from msprobe.core.spreadsheet import safe_table

XLSX_ROW_LIMIT = 1_048_575
FILLS = {"red": "FFFF0000", "yellow": "FFFFFF00"}


def timestamp() -> str:
    return time.strftime("%Y%m%d%H%M%S")


def _replace(temporary: Path, final: Path) -> Path:
    os.chmod(temporary, 0o640)
    os.replace(temporary, final)
    return final


def write_csv(table: pd.DataFrame, path: Path) -> Path:
    temporary = path.with_name(f".{path.name}.tmp")
    safe_table(table).to_csv(temporary, index=False)
    return _replace(temporary, path)


def write_xlsx(table: pd.DataFrame, highlight: dict[int, str], path: Path) -> Path | None:
    """Stream the table with XlsxWriter (constant memory), colouring suspicious rows.

    inf and nan go in as the text "inf\t", "-inf\t", "nan\t", as the reference writes them (a cell cannot
    hold them as numbers)."""
    if len(table) > XLSX_ROW_LIMIT:
        return None  # Excel cannot hold it; the CSV has everything
    import math

    import xlsxwriter

    temporary = path.with_name(f".{path.name}.tmp.xlsx")
    # text that looks like a formula (an API name from someone's dump.json) stays text
    workbook = xlsxwriter.Workbook(str(temporary), {"constant_memory": True, "strings_to_formulas": False})
    try:
        sheet = workbook.add_worksheet("Sheet")
        bold = workbook.add_format({"bold": True})
        fills = {color: workbook.add_format({"bg_color": "#" + argb[2:]}) for color, argb in FILLS.items()}
        sheet.write_row(0, 0, list(table.columns), bold)
        for index, row in enumerate(table.itertuples(index=False, name=None)):
            cells = [f"{v}\t" if isinstance(v, float) and not math.isfinite(v) else v for v in row]
            sheet.write_row(index + 1, 0, cells, fills.get(highlight.get(index, ""), None))
    finally:
        workbook.close()
    return _replace(temporary, path)


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
