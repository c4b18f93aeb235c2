"""Where a dump's step and rank folders are: the three layouts a path given to a command may have.

A folder holding dump.json (or the journal of a killed step) is one dump; a folder of ``rank*`` folders is one
per rank; a folder of ``step*`` folders is one per step and rank. mindstudio-probe 26.x writes ``proc{pid}``
where there is no rank.
"""

from __future__ import annotations

import re
from pathlib import Path

from msprobe.core.dump.writer import JOURNAL_NAME
from msprobe.core.errors import DataFileError

_NUMBERED = re.compile(r"^(rank|step|proc)(\d*)$")


def is_dump_folder(folder: Path) -> bool:
    return (folder / "dump.json").exists() or (folder / JOURNAL_NAME).exists()


def numbered(folder: Path, kind: str) -> dict[str, Path]:
    """``kind`` is "rank", "step" or "proc": the folders so named, by name."""
    found = {}
    for child in sorted(folder.iterdir()):
        match = _NUMBERED.match(child.name)
        if child.is_dir() and match and match[1] == kind:
            found[child.name] = child
    return found


def rank_folders(step_dir: Path) -> dict[str, Path]:
    """A step folder's rank folders by name. A lone ``proc{pid}`` folder is filed as ``rank``: a pid differs
    from run to run, and two such runs must pair."""
    ranks = numbered(step_dir, "rank")
    if ranks:
        return ranks
    processes = numbered(step_dir, "proc")
    return {"rank": next(iter(processes.values()))} if len(processes) == 1 else processes


def dump_folders(root: Path, field_name: str) -> dict[tuple[str, ...], Path]:
    """(step, rank) labels -> dump folder, from one of the three layouts; ``field_name`` names the path in
    errors."""
    if not root.is_dir():
        raise DataFileError(root, f"{field_name} is not a folder")
    if is_dump_folder(root):
        return {(): root}
    steps = numbered(root, "step")
    if steps:
        folders = {}
        for step, step_dir in steps.items():
            for rank, rank_dir in rank_folders(step_dir).items():
                folders[(step, rank)] = rank_dir
        if folders:
            return folders
    ranks = rank_folders(root)
    if ranks:
        return {(rank,): folder for rank, folder in ranks.items()}
    raise DataFileError(
        root, f"{field_name} holds no dump.json, rank* folders or step* folders (nor one proc{{pid}} folder)"
    )


def labels_order(labels: tuple[str, ...]) -> tuple:
    """A sort key for (step, rank) labels: by number (step2 before step10), then by name."""
    return tuple((label_number(label) if label_number(label) is not None else -1, label) for label in labels)


def step_and_rank_of_labels(labels: tuple[str, ...]) -> tuple[int | None, int | None]:
    """("step3", "rank1") -> (3, 1); a bare ``rank`` or a ``proc`` folder has no rank number (None)."""
    step = rank = None
    for label in labels:
        if label.startswith("step"):
            step = label_number(label)
        elif label.startswith("rank"):
            rank = label_number(label)
    return step, rank


def label_number(label: str) -> int | None:
    """``step3`` -> 3, ``rank`` -> None."""
    match = _NUMBERED.match(label)
    return int(match[2]) if match and match[2] else None
