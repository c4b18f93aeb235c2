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


def tensorboard_scalars(folder: str | Path) -> dict[str, dict[int, float]]:
    """Every scalar in a folder of TensorBoard event files: {tag: {step: value}}."""
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    events = EventAccumulator(str(folder))
    events.Reload()
    return {tag: {e.step: e.value for e in events.Scalars(tag)} for tag in events.Tags()["scalars"]}
