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
from msprobe.core.dump.writer import make_dir

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
    table.to_csv(temporary, index=False)
    return _replace(temporary, path)


def write_xlsx(table: pd.DataFrame, highlight: dict[int, str], path: Path) -> Path | None:
    if len(table) > XLSX_ROW_LIMIT:
        return None  # Excel cannot hold it; the CSV has everything
    from openpyxl.styles import PatternFill

    temporary = path.with_name(f".{path.name}.tmp.xlsx")
    with pd.ExcelWriter(temporary, engine="openpyxl") as writer:
        table.to_excel(writer, index=False, sheet_name="Sheet")
        sheet = writer.sheets["Sheet"]
        fills = {
            color: PatternFill(start_color=argb, end_color=argb, fill_type="solid") for color, argb in FILLS.items()
        }
        width = len(table.columns)
        for index, color in highlight.items():
            for column in range(1, width + 1):
                sheet.cell(row=index + 2, column=column).fill = fills[color]
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
    temporary = path.with_name(f".{path.name}.tmp")
    temporary.write_text(text, encoding="utf-8")
    return _replace(temporary, path)
