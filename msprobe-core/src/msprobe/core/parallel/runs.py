"""Two runs of other layouts (another number of ranks, or the same number laid out otherwise), made comparable.

Each step of a run of several processes is merged into the global run (``merge``) and written as a dump of one
process (``{output}/merged_npu/step{N}/rank/``, ``merged_bench`` likewise), which every command then reads as
it reads any dump: the tables, the diagnosis, the graph page. When the other run is of one process, its shapes
guide the merge. What should be alike on every rank and is not goes to ``rank_consistency_{timestamp}.json``.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from msprobe.core.dump.layout import dump_folders, labels_order, step_and_rank_of_labels
from msprobe.core.dump.reader import Dump, read_dump
from msprobe.core.dump.writer import make_dir, write_json_atomic
from msprobe.core.errors import DataFileError
from msprobe.core.parallel.merge import Finding, merge_ranks, values_of

logger = logging.getLogger(__name__)


@dataclass
class Prepared:
    """What to compare: the original folders, or the merged ones; and what the merge found."""

    npu: Path
    bench: Path
    merged: bool = False
    findings: dict[int | None, list[Finding]] = field(default_factory=dict)  # by step
    words: str = ""


def _by_step(folders: dict[tuple[str, ...], Path]) -> dict[str | None, dict[str, Path]]:
    steps: dict[str | None, dict[str, Path]] = {}
    for labels, folder in folders.items():
        step = next((label for label in labels if label.startswith("step")), None)
        rank = next((label for label in labels if not label.startswith("step")), "rank")
        steps.setdefault(step, {})[rank] = folder
    return steps


def _header(folder: Path) -> dict[str, Any] | None:
    """A dump's ``parallel`` header without this rank's own number: what tells two layouts apart."""
    try:
        layout = read_dump(folder).parallel
    except DataFileError:
        return None
    return None if layout is None else {key: value for key, value in layout.items() if key != "rank"}


def layouts_differ(npu_root: Path, bench_root: Path) -> bool:
    """Whether the two runs hold other ranks, or the same ranks laid out otherwise (their ``parallel`` headers)."""
    npu, bench = _by_step(dump_folders(npu_root, "npu_path")), _by_step(dump_folders(bench_root, "bench_path"))
    for step in set(npu) & set(bench):
        if set(npu[step]) != set(bench[step]):
            return len(npu[step]) > 1 or len(bench[step]) > 1
        first = sorted(npu[step])[0]
        if _header(npu[step][first]) != _header(bench[step][first]):
            return True
    return False


def prepare(npu_root: Path, bench_root: Path, output_dir: Path) -> Prepared:
    """The folders to compare: as given, or each step's ranks merged where the two runs' layouts differ."""
    if not (npu_root.is_dir() and bench_root.is_dir()) or not layouts_differ(npu_root, bench_root):
        return Prepared(npu_root, bench_root)
    npu, bench = _by_step(dump_folders(npu_root, "npu_path")), _by_step(dump_folders(bench_root, "bench_path"))
    steps = sorted(set(npu) & set(bench), key=lambda step: labels_order((step,)) if step else ())
    prepared = Prepared(output_dir / "merged_npu", output_dir / "merged_bench", merged=True)
    sides = ((npu, bench, prepared.npu), (bench, npu, prepared.bench))
    counts = []
    for step in steps:
        for ours, theirs, root in sides:
            ranks = ours[step]
            guide = None
            if len(theirs[step]) == 1:  # a run of one process: its shapes say where each piece goes
                guide = values_of(read_dump(next(iter(theirs[step].values()))))
            if len(ranks) == 1:
                dump = read_dump(next(iter(ranks.values())))
                merged, findings = dump, []
            else:
                numbered = {}
                for label, folder in ranks.items():
                    number = step_and_rank_of_labels((label,))[1]
                    numbered[number if number is not None else 0] = read_dump(folder)
                result = merge_ranks(numbered, guide)
                merged, findings = result.dump, result.findings
                if root is prepared.npu:
                    prepared.findings[step_and_rank_of_labels((step,))[0] if step else None] = findings
            _write(merged, root / step / "rank" if step else root / "rank")
        counts.append((len(npu[step]), len(bench[step])))
    npu_count, bench_count = counts[0] if counts else (0, 0)
    prepared.words = (
        f"{npu_count} rank{'s' if npu_count != 1 else ''} against {bench_count}: each step's ranks merged into "
        f"the global run ({output_dir / 'merged_npu'}, {output_dir / 'merged_bench'})"
    )
    return prepared


def _write(dump: Dump, folder: Path) -> None:
    """A merged step as a dump of one process, which every reader takes as it is."""
    make_dir(folder)
    header = {"task": dump.task, "level": dump.level, "framework": dump.framework, "dump_data_dir": None}
    if dump.parallel:
        header["parallel"] = dump.parallel
    write_json_atomic(folder / "dump.json", {**header, "data": dump.data})
    write_json_atomic(folder / "construct.json", dump.construct)
    write_json_atomic(folder / "stack.json", dump.stack)
