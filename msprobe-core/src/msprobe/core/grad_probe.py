"""Grad probe, the framework-neutral half: summaries on disk, and comparing two runs.

A framework measures each watched parameter's gradient at every optimizer
step and hands a :class:`GradRecord` to :class:`GradSummaryWriter`, which
writes ``dump_path/rank{R}/grad_summary_{step}.csv`` and, at levels L1/L2,
the gradient's direction as packed sign bits in
``dump_path/rank{R}/step{step}/{param}.npy``. :class:`GradComparator`
compares two such runs step by step: the share of elements whose direction
agrees, per parameter and weighted over all of them, and names the first
step that went wrong (similarity below 0.97 at the first step, or a drop of
more than 0.03 from one step to the next).
"""

from __future__ import annotations

import csv
import functools
import itertools
import logging
import math
import re
import threading
import weakref
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from msprobe.core import spreadsheet
from msprobe.core.dump import float_stats
from msprobe.core.dump.file_pool import FilePool
from msprobe.core.dump.npy_file import write_npy
from msprobe.core.dump.writer import make_dir, open_new_file
from msprobe.core.errors import DataFileError

logger = logging.getLogger(__name__)

FIRST_STEP_FLOOR = 0.97
MAX_DROP = 0.03
_SUMMARY = re.compile(r"^grad_summary_(\d+)\.csv$")


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
        temporary = folder / f".grad_summary_{step}.csv.tmp"
        directions = []
        with open_new_file(temporary) as handle:
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


def _read_summary(path: Path) -> dict[str, int]:
    """Parameter name -> element count, from a grad_summary CSV."""
    try:
        with open(path, encoding="utf-8", newline="") as handle:
            rows = list(csv.DictReader(handle))
    except OSError as exc:
        raise DataFileError(path, f"cannot be read ({exc.strerror})") from None
    sizes = {}
    for row in rows:
        if "Param_name" not in row or "Shape" not in row:
            raise DataFileError(path, "not a grad_summary file (needs Param_name and Shape columns)")
        dims = [int(d) for d in re.findall(r"\d+", row["Shape"] or "")]
        sizes[row["Param_name"]] = math.prod(dims) if dims else 1
    return sizes


def _load_signs(path: Path, count: int) -> np.ndarray | None:
    if not path.exists():
        return None
    try:
        data = np.load(path, allow_pickle=False)
    except (ValueError, OSError) as exc:
        raise DataFileError(path, f"not a readable direction file ({exc})") from None
    if data.dtype == np.bool_:  # the reference's unpacked form
        return data.ravel()
    return np.unpackbits(data.ravel(), count=count).astype(bool)


def _steps(rank_dir: Path) -> dict[int, Path]:
    return {int(m.group(1)): p for p in rank_dir.iterdir() if (m := _SUMMARY.match(p.name))}


@dataclass
class RankComparison:
    rank: str
    steps: list[int]
    similarities: dict[str, list[float]]  # parameter -> similarity per step
    overall: list[float]
    first_bad_step: int | None
    bad_parameters: list[str]


def _first_bad(steps: list[int], series: dict[str, list[float]]) -> tuple[int | None, list[str]]:
    for position, step in enumerate(steps):
        bad = []
        for name, values in series.items():
            value = values[position]
            if math.isnan(value):
                continue
            if position == 0 and value < FIRST_STEP_FLOOR:
                bad.append(name)
            elif position > 0 and not math.isnan(values[position - 1]) and values[position - 1] - value > MAX_DROP:
                bad.append(name)
        if bad:
            return step, bad
    return None, []


class GradComparator:
    """The reference's API: ``GradComparator.compare_distributed(path1, path2, output)``."""

    @staticmethod
    def compare_rank(dir1: Path, dir2: Path, output: Path, rank: str = "") -> RankComparison:
        wait_for_writers()  # runs dumped by this very process: their last direction files may still be on the way
        steps1, steps2 = _steps(dir1), _steps(dir2)
        steps = sorted(set(steps1) & set(steps2))
        if not steps:
            raise DataFileError(dir1, f"no grad_summary step in common with {dir2}")
        series: dict[str, list[float]] = {}
        overall = []
        for position, step in enumerate(steps):
            sizes = _read_summary(steps1[step])
            agree_total = count_total = 0
            for name, count in sizes.items():
                a = _load_signs(dir1 / f"step{step}" / f"{name}.npy", count)
                b = _load_signs(dir2 / f"step{step}" / f"{name}.npy", count)
                value = float("nan")
                if a is not None and b is not None and a.shape == b.shape and a.size:
                    agree = int(np.count_nonzero(a == b))
                    value = agree / a.size
                    agree_total += agree
                    count_total += a.size
                series.setdefault(name, [float("nan")] * position).append(value)
            for values in series.values():
                values.extend([float("nan")] * (position + 1 - len(values)))
            overall.append(agree_total / count_total if count_total else float("nan"))
        if all(math.isnan(v) for v in overall):
            raise DataFileError(dir1, "no direction data (step{N}/*.npy): dump with grad_level L1 or L2")
        first, bad = _first_bad(steps, {**series, "summary": overall})
        result = RankComparison(rank, steps, series, overall, first, bad)
        _write_similarities(result, make_dir(output))
        return result

    @staticmethod
    def compare_distributed(path1: str | Path, path2: str | Path, output: str | Path) -> list[RankComparison]:
        path1, path2, output = Path(path1), Path(path2), Path(output)
        ranks1 = {p.name: p for p in path1.glob("rank*") if p.is_dir()} if path1.is_dir() else {}
        ranks2 = {p.name: p for p in path2.glob("rank*") if p.is_dir()} if path2.is_dir() else {}
        common = sorted(set(ranks1) & set(ranks2))
        if not common:
            raise DataFileError(path1, f"no rank folder in common with {path2} (expected rank0, rank1, ...)")
        single = len(common) == 1
        return [
            GradComparator.compare_rank(ranks1[r], ranks2[r], output if single else output / r, r[len("rank") :])
            for r in common
        ]


def _write_similarities(result: RankComparison, folder: Path) -> None:
    path = folder / "similarities.csv"
    with open_new_file(path.with_name(".similarities.csv.tmp")) as handle:
        writer = spreadsheet.writer(handle)
        writer.writerow(["step", *result.similarities, "summary"])
        for position, step in enumerate(result.steps):
            writer.writerow(
                [step, *(values[position] for values in result.similarities.values()), result.overall[position]]
            )
    path.with_name(".similarities.csv.tmp").replace(path)
    _plot(result, folder / "similarities_picture")


def _plot(result: RankComparison, folder: Path) -> None:
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        logger.warning("similarity plots need matplotlib: pip install 'msprobe-core[plots]'")
        return
    make_dir(folder)
    curves = {**result.similarities, "summary_similarities": result.overall}
    for name, values in curves.items():
        figure, axes = plt.subplots(figsize=(6, 3.5))
        axes.plot(result.steps, values, marker="o")
        axes.axhline(FIRST_STEP_FLOOR, color="tab:red", linestyle="--", linewidth=0.8)
        axes.set_xlabel("step")
        axes.set_ylabel("direction similarity")
        axes.set_ylim(min(0.0, np.nanmin(values) if len(values) else 0.0), 1.02)
        axes.set_title(name)
        figure.tight_layout()
        figure.savefig(folder / f"{name}.png", dpi=80)
        plt.close(figure)


def measure_array(name: str, array: np.ndarray, level: str, bounds: list[float]) -> GradRecord:
    """A GradRecord from a host array: for backends that hand the gradient over as numpy."""
    import hashlib

    flat = np.ascontiguousarray(array).reshape(-1)
    quick = float_stats.stats_of(flat) if flat.dtype in (np.float32, np.float64) and flat.size else None
    if quick is not None:  # one pass in C, the numbers the PyTorch side reports for the same values
        maximum, minimum, _, norm = quick
    else:
        wide = flat.astype(np.float64)
        maximum, minimum, norm = float(wide.max()), float(wide.min()), float(np.linalg.norm(wide))
    record = GradRecord(name, list(np.shape(array)), maximum, minimum, norm)
    if level == "L0":
        record.md5 = hashlib.md5(flat.tobytes()).hexdigest()
        return record
    record.signs = np.packbits(flat > 0)
    if level == "L2":
        values = flat.astype(np.float64)
        edges = np.asarray(bounds, dtype=np.float64)
        counts = np.bincount(np.searchsorted(edges, values, side="left"), minlength=len(edges) + 1)
        record.buckets = (counts / values.size).tolist()
        record.zeros = float(np.mean(values == 0))
    return record
