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
from collections.abc import Iterable
from typing import IO, Any

import pandas as pd

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

    def writerow(self, row: Iterable[Any]) -> Any:
        return self._writer.writerow([safe_cell(value) for value in row])

    def write_header(self, columns: Iterable[str]) -> Any:
        """The tool's own column names, as the reference spells them (grad probe's "=0"): written as they are."""
        return self._writer.writerow(columns)

    def writerows(self, rows: Iterable[Iterable[Any]]) -> None:
        for row in rows:
            self.writerow(row)


def writer(handle: IO[str], **options: Any) -> SafeWriter:
    return SafeWriter(handle, **options)
