"""What a run's dump came to: the line a user reads at the end of a run."""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path


@dataclass
class DumpTotals:
    """The step folders the run wrote and the entries in them."""

    folders: list[Path] = field(default_factory=list)
    entries: int = 0

    def add(self, folder: Path, entries: int) -> None:
        if folder not in self.folders:
            self.folders.append(folder)
        self.entries += entries

    def files_and_bytes(self) -> tuple[int, int]:
        """Every file under the folders (tensor files included), read from the directory entries alone; the
        tool's hidden working files (a journal kept ready for the next step) are not the dump's."""
        files = size = 0
        for folder in self.folders:
            for root, _dirs, names in os.walk(folder):
                for name in names:
                    if name.startswith("."):
                        continue
                    try:
                        size += os.lstat(os.path.join(root, name)).st_size
                    except OSError:  # removed meanwhile
                        continue
                    files += 1
        return files, size

    def line(self, dump_path: str) -> str:
        """The run's last line; in a process of a job of several, about its own rank's part (each prints its own),
        read from the rank folders it wrote."""
        files, size = self.files_and_bytes()
        steps = len({folder.parent for folder in self.folders})
        ranks = sorted({folder.name for folder in self.folders if folder.name[4:].isdigit()})
        part = f" ({ranks[0].replace('rank', 'rank ')}'s part)" if len(ranks) == 1 else ""
        return (
            f"msprobe: the dump is in {dump_path}{part}: {_count(steps, 'step', 'steps')}, "
            f"{_count(self.entries, 'entry', 'entries')}, {_count(files, 'file', 'files')}, {_size(size)}"
        )

    def first_step_line(self, step: int, rank: int | None, seconds: float, plain_seconds: float | None) -> str:
        """The cost of the first dumped step: what it wrote on this rank and how long it took."""
        files, size = DumpTotals(self.folders[:1]).files_and_bytes()
        where = f"rank {rank}" if rank is not None else "this process"
        time = f"{seconds:.2f} s from its start to step()"
        if plain_seconds:
            time += f" ({seconds / plain_seconds:.1f}x a step without the dump, {plain_seconds:.2f} s)"
        return (
            f"msprobe: step {step} dumped on {where}: {_count(self.entries, 'entry', 'entries')}, {_size(size)} in "
            f"{_count(files, 'file', 'files')}, "
            f"{time}; at this rate each dumped step writes {_size(size)} per rank"
        )


def _size(count: int) -> str:
    if count < 1000:
        return f"{count} B"
    value = float(count)
    for unit in ("KB", "MB", "GB", "TB"):
        value /= 1000
        if value < 1000 or unit == "TB":
            break
    return f"{value:.1f} {unit}"


def _count(number: int, one: str, many: str) -> str:
    return f"{number:,} {one if number == 1 else many}"
