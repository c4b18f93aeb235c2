"""accuracy_checking_result/details CSVs, written API by API so a run can resume.

Each finished API appends its details rows, then its result row, and both
files are flushed. Resuming (``-csv_path``) reads the result file to learn
which APIs are done and drops details rows of an API whose result row never
arrived (the run was killed between the two), so a resumed run ends with
the same files as an uninterrupted one.
"""

from __future__ import annotations

import csv
import os
import time
from collections.abc import Iterable
from pathlib import Path

from msprobe.core import spreadsheet
from msprobe.core.errors import DataFileError
from msprobe.core.files import make_dir, new_file
from msprobe.core.precheck.metrics import DETAIL_COLUMNS, RESULT_COLUMNS, Detail

RESULT_PREFIX = "accuracy_checking_result_"
DETAILS_PREFIX = "accuracy_checking_details_"


def _open_append(path: Path):
    flags = os.O_WRONLY | os.O_CREAT | os.O_APPEND | getattr(os, "O_NOFOLLOW", 0)
    return os.fdopen(
        os.open(path, flags, 0o640), "a", newline="", encoding="utf-8-sig" if not path.exists() else "utf-8"
    )


def details_path_for(result_csv: Path) -> Path:
    if not result_csv.name.startswith(RESULT_PREFIX):
        raise DataFileError(result_csv, f"a resume file must be named {RESULT_PREFIX}{{timestamp}}.csv")
    return result_csv.with_name(DETAILS_PREFIX + result_csv.name[len(RESULT_PREFIX) :])


def _read_rows(path: Path, columns: list[str]) -> list[list[str]]:
    try:
        with open(path, encoding="utf-8-sig", newline="") as handle:
            rows = list(csv.reader(handle))
    except FileNotFoundError:
        raise DataFileError(path, "not found") from None
    if not rows or rows[0] != columns:
        raise DataFileError(path, f"not an msprobe run_ut file (expected the header {columns[:3]}...)")
    return rows[1:]


class ResultFiles:
    """The pair of CSV files of one run_ut run."""

    def __init__(self, output_dir: Path, resume_from: Path | None = None, stamp: str | None = None):
        if resume_from is not None:
            self.result = Path(resume_from)
            self.details = details_path_for(self.result)
            self.done = self._recover()
            self._resumed = True
        else:
            make_dir(Path(output_dir))
            stamp = stamp or time.strftime("%Y%m%d%H%M%S")
            self.result = Path(output_dir) / f"{RESULT_PREFIX}{stamp}.csv"
            self.details = Path(output_dir) / f"{DETAILS_PREFIX}{stamp}.csv"
            for path, columns in ((self.result, RESULT_COLUMNS), (self.details, DETAIL_COLUMNS)):
                with _open_append(path) as handle:
                    spreadsheet.writer(handle).writerow(columns)
            self.done: set[str] = set()

    def discard_if_empty(self) -> None:
        """A run that failed before its first result (a receiver whose start was refused) leaves no files that
        look like a finished run with nothing in it."""
        if self.done or getattr(self, "_resumed", False):
            return
        for path in (self.result, self.details):
            path.unlink(missing_ok=True)

    def _recover(self) -> set[str]:
        results = _read_rows(self.result, RESULT_COLUMNS)
        done = {row[0] for row in results if row}
        details = _read_rows(self.details, DETAIL_COLUMNS) if self.details.exists() else []
        kept = [row for row in details if row and api_of_detail(row[0]) in done]
        if len(kept) != len(details):  # an API was cut between its details and its result
            with new_file(self.details, "w", newline="", encoding="utf-8-sig") as handle:
                writer = spreadsheet.writer(handle)
                writer.writerow(DETAIL_COLUMNS)
                writer.writerows(kept)
        return done

    def write_api(self, api_name: str, forward: str, backward: str, message: str, details: Iterable[Detail]) -> None:
        with _open_append(self.details) as handle:
            spreadsheet.writer(handle).writerows(detail.row() for detail in details)
        with _open_append(self.result) as handle:
            spreadsheet.writer(handle).writerow([api_name, forward, backward, message])
        self.done.add(api_name)


def api_of_detail(detail_name: str) -> str:
    """'Functional.relu.0.backward.output.0' -> 'Functional.relu.0.forward' (its result row)."""
    for marker in (".forward.", ".backward."):
        position = detail_name.find(marker)
        if position != -1:
            return detail_name[:position] + ".forward"
    return detail_name
