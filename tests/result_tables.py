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


def check_rank_gradients(run_dir: str | Path, weight: str, ranks: tuple[int, ...] = (0, 1)) -> None:
    """A two-rank monitor run: each rank's grad_unreduced is its local gradient, grad_reduced the reduced one.

    ``run_dir/expected{rank}.json`` holds the norms the training script computed
    itself (``local``, ``reduced``); the monitor wrote ``run_dir/out/*-rank{R}``.
    """
    import json

    import pytest

    run_dir = Path(run_dir)
    local_norms = []
    for rank in ranks:
        expected = json.loads((run_dir / f"expected{rank}.json").read_text())
        (folder,) = list((run_dir / "out").glob(f"*-rank{rank}"))
        unreduced = {r["name"]: float(r["norm"]) for r in csv_rows(folder / "grad_unreduced_0-0.csv")}
        reduced = {r["name"]: float(r["norm"]) for r in csv_rows(folder / "grad_reduced_0-0.csv")}
        assert unreduced[weight] == pytest.approx(expected["local"], rel=1e-5)
        assert reduced[weight] == pytest.approx(expected["reduced"], rel=1e-5)
        local_norms.append(unreduced[weight])
    assert local_norms[0] != pytest.approx(local_norms[1])  # the ranks really saw different data
