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
            for rank, rank_dir in (numbered(step_dir, "rank") or numbered(step_dir, "proc")).items():
                folders[(step, rank)] = rank_dir
        if folders:
            return folders
    ranks = numbered(root, "rank")
    if ranks:
        return {(rank,): folder for rank, folder in ranks.items()}
    raise DataFileError(root, f"{field_name} holds no dump.json, rank* folders or step* folders")


def label_number(label: str) -> int | None:
    """``step3`` -> 3, ``rank`` -> None."""
    match = _NUMBERED.match(label)
    return int(match[2]) if match and match[2] else None
