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
from msprobe.core.compare.xlsx import XLSX_ROW_LIMIT, XlsxStream
from msprobe.core.dump.writer import make_dir, new_file
from msprobe.core.spreadsheet import write_csv_table


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


def write_xlsx(table: pd.DataFrame, highlight: dict[int, str], path: Path) -> Path | None:
    """The whole table at once; None when Excel cannot hold it (the CSV has everything)."""
    if len(table) > XLSX_ROW_LIMIT:
        return None
    stream = XlsxStream(path, list(table.columns))
    try:
        stream.add_table(table, highlight)
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
