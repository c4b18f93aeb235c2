"""Reading the CSV files the tools write, for assertions."""

import csv
from pathlib import Path


def csv_rows(path: str | Path) -> list[dict[str, str]]:
    """All rows of a CSV file as dicts; an absent file reads as no rows."""
    path = Path(path)
    if not path.exists():
        return []
    with path.open(newline="") as handle:
        return list(csv.DictReader(handle))
