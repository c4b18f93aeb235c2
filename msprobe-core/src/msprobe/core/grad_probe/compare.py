"""Grad probe after training: two runs compared step by step, the first step that went wrong."""

from __future__ import annotations

import csv
import logging
import math
import re
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from msprobe.core import spreadsheet
from msprobe.core.errors import DataFileError
from msprobe.core.files import make_dir, new_file
from msprobe.core.grad_probe.collect import FIRST_STEP_FLOOR, MAX_DROP, SUMMARY_FILE, wait_for_writers
from msprobe.core.jobs import Engine, run_jobs

logger = logging.getLogger(__name__)


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
    return {int(m.group(1)): p for p in rank_dir.iterdir() if (m := SUMMARY_FILE.match(p.name))}


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
    def compare_distributed(
        path1: str | Path, path2: str | Path, output: str | Path, engine: Engine | None = None
    ) -> list[RankComparison]:
        """Each rank pair one job on ``engine`` (default: in this process)."""
        path1, path2, output = Path(path1), Path(path2), Path(output)
        ranks1 = {p.name: p for p in path1.glob("rank*") if p.is_dir()} if path1.is_dir() else {}
        ranks2 = {p.name: p for p in path2.glob("rank*") if p.is_dir()} if path2.is_dir() else {}
        common = sorted(set(ranks1) & set(ranks2))
        if not common:
            raise DataFileError(path1, f"no rank folder in common with {path2} (expected rank0, rank1, ...)")
        single = len(common) == 1
        jobs = [(ranks1[r], ranks2[r], output if single else output / r, r[len("rank") :]) for r in common]
        return run_jobs(_compare_rank_job, jobs, engine or Engine(workers=1), "ranks")


def _compare_rank_job(job: tuple[Path, Path, Path, str]) -> RankComparison:
    return GradComparator.compare_rank(*job)


def _write_similarities(result: RankComparison, folder: Path) -> None:
    path = folder / "similarities.csv"
    with new_file(path, "w") as handle:
        writer = spreadsheet.writer(handle)
        writer.writerow(["step", *result.similarities, "summary"])
        for position, step in enumerate(result.steps):
            writer.writerow(
                [step, *(values[position] for values in result.similarities.values()), result.overall[position]]
            )
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
