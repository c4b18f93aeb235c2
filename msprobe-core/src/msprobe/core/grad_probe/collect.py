"""Grad probe while training: what a framework hands over, and the files written for it."""

from __future__ import annotations

import functools
import itertools
import logging
import re
import threading
import weakref
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from msprobe.core import spreadsheet
from msprobe.core.dump.file_pool import FilePool
from msprobe.core.dump.npy_file import write_npy
from msprobe.core.files import make_dir, open_private

logger = logging.getLogger(__name__)


FIRST_STEP_FLOOR = 0.97
MAX_DROP = 0.03
SUMMARY_FILE = re.compile(r"^grad_summary_(\d+)\.csv$")


def interval_names(bounds: list[float]) -> list[str]:
    """[-1, 0, 1] -> ['(-inf, -1]', '(-1, 0]', '(0, 1]', '(1, inf)']."""
    edges = ["-inf", *[_number(b) for b in bounds], "inf"]
    names = [f"({low}, {high}]" for low, high in itertools.pairwise(edges)]
    names[-1] = names[-1][:-1] + ")"
    return names


def _number(value: float) -> str:
    return str(int(value)) if float(value).is_integer() else str(value)


def header(level: str, bounds: list[float]) -> list[str]:
    if level == "L0":
        return ["Param_name", "MD5", "Max", "Min", "Norm", "Shape"]
    if level == "L1":
        return ["Param_name", "Max", "Min", "Norm", "Shape"]
    return ["Param_name", *interval_names(bounds), "=0", "Max", "Min", "Norm", "Shape"]


@dataclass
class GradRecord:
    """One parameter's gradient at one step, as the framework measured it."""

    name: str
    shape: list[int]
    maximum: float
    minimum: float
    norm: float
    md5: str = ""
    buckets: list[float] | None = None  # share of elements per interval
    zeros: float = 0.0
    signs: np.ndarray | None = None  # packed bits of (gradient > 0)


_WRITERS: weakref.WeakSet = weakref.WeakSet()


def wait_for_writers() -> None:
    """Every direction file this process has handed to a writer is on disk (a comparison reads them next)."""
    for writer in list(_WRITERS):
        writer.settle()


class _SummaryAfterFiles:
    """Moves a step's summary into place when the last of its direction files is written.

    A summary on disk thus stands for a complete step: a process killed
    while the files were being written leaves no summary for that step (and
    the comparison, which lists steps by their summaries, does not see it),
    rather than a summary whose direction files are missing. A file that
    failed still counts as done: its summary and the other files stand.
    """

    def __init__(self, temporary: Path, path: Path, files: int):
        self.temporary, self.path = temporary, path
        self._left = files
        self._lock = threading.Lock()

    def write(self, path: Path, signs: np.ndarray) -> None:
        try:
            write_npy(path, signs)
        finally:
            with self._lock:
                self._left -= 1
                last = self._left == 0
            if last:
                self.temporary.replace(self.path)


class GradSummaryWriter:
    """Writes each step's summary and its direction files, the files on a few threads (see FilePool).

    A step's files are all on disk when the next step is written, when the
    backend's ``finish()`` runs, before a comparison in the same process,
    and at exit (not at each ``step()``: they are written while the next
    step computes); its summary appears when they are (see
    _SummaryAfterFiles). A file that fails is reported once and the others
    are still written.
    """

    def __init__(self, dump_path: str | Path, level: str, bounds: list[float]):
        self.dump_path = Path(dump_path)
        self.level = level
        self.bounds = bounds
        self._files = FilePool()
        self._writing_step: int | None = None
        _WRITERS.add(self)

    def settle(self) -> None:
        """Wait for the direction files still being written."""
        step, self._writing_step = self._writing_step, None
        if step is None:
            return
        try:
            self._files.wait()
        except Exception as exc:  # the summary and the other files stand; training goes on
            logger.warning("msprobe grad probe: a direction file of step %d was not written (%s)", step, exc)

    def close(self) -> None:
        self.settle()
        self._files.close()

    def rank_dir(self, rank: int) -> Path:
        return self.dump_path / f"rank{rank}"

    def write_step(self, step: int, rank: int, records: Iterable[GradRecord]) -> Path:
        self.settle()
        folder = make_dir(self.rank_dir(rank))
        columns = header(self.level, self.bounds)
        direction_dir = make_dir(folder / f"step{step}") if self.level in ("L1", "L2") else None
        path = folder / f"grad_summary_{step}.csv"
        directions = []
        handle, temporary = open_private(path, "w")
        with handle:
            writer = spreadsheet.writer(handle)
            writer.write_header(columns)
            for record in records:
                writer.writerow(self._row(record))
                if direction_dir is not None and record.signs is not None:
                    directions.append((direction_dir / f"{record.name}.npy", record.signs))
        if not directions:
            temporary.replace(path)
            return path
        summary = _SummaryAfterFiles(temporary, path, len(directions))
        self._writing_step = step
        for file_path, signs in directions:
            self._files.submit(functools.partial(summary.write, file_path, signs))
        return path

    def _row(self, record: GradRecord) -> list:
        stats = [record.maximum, record.minimum, record.norm, tuple(record.shape)]
        if self.level == "L0":
            return [record.name, record.md5, *stats]
        if self.level == "L1":
            return [record.name, *stats]
        buckets = record.buckets or [0.0] * (len(self.bounds) + 1)
        return [record.name, *buckets, record.zeros, *stats]


class GradProbeHooks:
    """What both backends' grad probes share: the ``param_list`` filter and closing the writer.

    A backend sets ``wanted`` (the config's ``param_list``) and ``writer``.
    """

    wanted: list[str]
    writer: GradSummaryWriter

    def watched(self, name: str) -> bool:
        return not self.wanted or any(item == name or item in name for item in self.wanted)

    def close(self) -> None:
        self.writer.close()


# -- comparing two runs ------------------------------------------------------------------
