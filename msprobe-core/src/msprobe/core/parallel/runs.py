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

import numpy as np

from msprobe.core.diagnosis.answer import DIVERGENCE, Diagnosis
from msprobe.core.dump.layout import dump_folders, labels_order, step_and_rank_of_labels
from msprobe.core.dump.reader import Dump, read_dump
from msprobe.core.errors import DataFileError
from msprobe.core.files import make_dir, write_json_atomic
from msprobe.core.parallel.merge import PHASES, Finding, merge_ranks, values_of
from msprobe.core.parallel.own_calls import own_patterns, without_own_calls
from msprobe.core.tensor_files import save_npy, tensor_readers

logger = logging.getLogger(__name__)


@dataclass
class Prepared:
    """What to compare: the original folders, or the merged ones; and what the merge found."""

    npu: Path
    bench: Path
    merged: bool = False
    findings: dict[int | None, list[Finding]] = field(default_factory=dict)  # by step
    places: dict[int | None, dict[str, int]] = field(default_factory=dict)  # by step: entry -> place in the merge
    stage_of: dict[int | None, dict[str, int | list[int]]] = field(default_factory=dict)  # by step: entry -> rank(s)
    ranks: int = 0  # the sharded run's ranks
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


def _world(folder: Path) -> int:
    layout = _header(folder)
    size = (layout or {}).get("world_size")
    return size if isinstance(size, int) else 1


def layouts_differ(npu_root: Path, bench_root: Path) -> bool:
    """Whether the two runs hold other ranks, or the same ranks laid out otherwise (their ``parallel`` headers)."""
    npu, bench = _by_step(dump_folders(npu_root, "npu_path")), _by_step(dump_folders(bench_root, "bench_path"))
    for step in set(npu) & set(bench):
        if set(npu[step]) != set(bench[step]):
            if len(npu[step]) > 1 or len(bench[step]) > 1:
                return True
            # one folder each, named apart: a run of several ranks of which one is here is to be refused
            return any(_world(next(iter(side[step].values()))) > 1 for side in (npu, bench))
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
    counts = []
    # the modules a declared layout compares at their boundary: their calls are left out of both runs (the
    # layout is the run's config, the same at every step: one header per side says it)
    sharded = [next((ranks for ranks in side.values() if len(ranks) > 1), None) for side in (npu, bench)]
    own = own_patterns(_header(next(iter(ranks.values()))) for ranks in sharded if ranks is not None)
    for step in steps:
        # the side that merges alone first (one process, or data parallel: its layout says where each piece
        # goes), then the other, guided by its global run's shapes
        sides = [(npu[step], prepared.npu), (bench[step], prepared.bench)]
        sides.sort(key=lambda side: 0 if len(side[0]) == 1 else 1 if _data_parallel(side[0]) else 2)
        guide = None
        for ranks, root in sides:
            folder = root / step / "rank" if step else root / "rank"
            merged = _merged_side(ranks, folder, guide, step, prepared if root is prepared.npu else None, own)
            _write(merged, folder)
            guide = values_of(merged)
        counts.append((len(npu[step]), len(bench[step])))
    npu_count, bench_count = counts[0] if counts else (0, 0)
    prepared.words = (
        f"{npu_count} rank{'s' if npu_count != 1 else ''} against {bench_count}: each step's ranks merged into "
        f"the global run ({output_dir / 'merged_npu'}, {output_dir / 'merged_bench'})"
    )
    return prepared


def _data_parallel(ranks: dict[str, Path]) -> bool:
    layout = _header(next(iter(ranks.values())))
    return bool(layout and layout.get("data_parallel"))


def _merged_side(
    ranks: dict[str, Path], folder: Path, guide: Any, step: str | None, prepared: Prepared | None, own: list[str]
) -> Dump:
    """One side of one step as a dump of one process: its ranks merged, or its one rank as it is (its tensor
    files read where they are)."""
    if len(ranks) == 1:
        folder_of_rank = next(iter(ranks.values()))
        dump = read_dump(folder_of_rank)
        world = (dump.parallel or {}).get("world_size")
        if isinstance(world, int) and world > 1:  # one rank of a run of several: the others are missing
            raise DataFileError(
                folder_of_rank.parent,
                f"holds 1 of the run's {world} ranks ({folder_of_rank.name}): nothing is merged from a partial set "
                "of ranks",
            )
        tensors = dump.tensor_dir()
        dump.dump_data_dir = str(tensors.resolve()) if tensors is not None else None
        return without_own_calls(dump, own)
    numbered = {}
    for label, rank_folder in ranks.items():
        number = step_and_rank_of_labels((label,))[1]
        numbered[number if number is not None else 0] = read_dump(rank_folder)
    files = _TensorFolder(numbered, folder) if any(dump.task == "tensor" for dump in numbered.values()) else None
    result = merge_ranks(numbered, guide, files, own)
    if prepared is not None:  # the run under investigation: what its ranks disagree on is part of the answer
        number = step_and_rank_of_labels((step,))[0] if step else None
        prepared.findings[number] = result.findings
        prepared.places[number] = {name: index for index, name in enumerate(result.dump.data)}
        prepared.stage_of[number] = result.stage_of
        prepared.ranks = len(ranks)
    return result.dump


def _write(dump: Dump, folder: Path) -> None:
    """A merged step as a dump of one process, which every reader takes as it is."""
    make_dir(folder)
    header = {"task": dump.task, "level": dump.level, "framework": dump.framework, "dump_data_dir": dump.dump_data_dir}
    if dump.parallel:
        header["parallel"] = dump.parallel
    write_json_atomic(folder / "dump.json", {**header, "data": dump.data})
    write_json_atomic(folder / "construct.json", dump.construct)
    write_json_atomic(folder / "stack.json", dump.stack)


def first_answer(
    diagnosis: Diagnosis | None, findings: list[Finding], places: dict[str, int], ranks: int
) -> Diagnosis | None:
    """The answer of a compare across layouts: where the runs part ways, or, when the ranks disagree on a value
    they must share before that (in the order the calls ran), that value, with the ranks that hold it otherwise.
    A rank out of step shows where it parts from the others; what the merge makes of its values later is its
    consequence."""
    if not findings:
        return diagnosis
    first = findings[0]
    if diagnosis is not None and diagnosis.verdict == DIVERGENCE:
        phase = PHASES.index(diagnosis.phase) if diagnosis.phase in PHASES else 0
        if (phase, places.get(diagnosis.api or "", len(places))) < (PHASES.index(first.phase), first.order):
            return diagnosis
    alone = len(first.ranks) == 1 and ranks > 1
    return Diagnosis(
        DIVERGENCE,
        step=diagnosis.step if diagnosis is not None else None,
        rank=first.ranks[0] if alone else None,
        phase=first.phase,
        module=first.module,
        api=first.entry,
        cause="ranks",
        detail=f"{first.where}: {first.said()}",
        confidence="high",
        ranks=list(first.ranks),
        alone=alone,
    )


class _TensorFolder:
    """A tensor dump's ranks' files, read with the installed backends' readers; the merged ones written as
    ``.npy`` beside the merged dump.json."""

    def __init__(self, dumps: dict[int, Dump], folder: Path):
        self.readers = tensor_readers()
        self.dumps = dumps
        self.folder = folder / "dump_tensor_data"
        self.suffix, self.write = ".npy", save_npy  # a file any reader opens, unless the dump's backend is here
        framework = next(iter(dumps.values())).framework
        try:
            from msprobe.core.plugins import get_registry

            for backend in get_registry().backends().values():
                if framework in (backend.name, *backend.aliases) and backend.tensor_suffix:
                    self.suffix, self.write = backend.tensor_suffix, backend.save_tensor
        except Exception as exc:  # no plugins: .npy, which msprobe reads; mindstudio-probe reads the backend's
            logger.debug("merged tensors written as .npy: %s", exc)

    def load(self, rank: int, piece: dict) -> np.ndarray | None:
        path = self.dumps[rank].tensor_file(piece.get("data_name"))
        reader = self.readers.get(path.suffix) if path is not None else None
        return None if reader is None else np.asarray(reader(path))

    def save(self, file_name: str, array: np.ndarray) -> str:
        name = str(Path(file_name).with_suffix(self.suffix))
        make_dir(self.folder)
        self.write(array, self.folder / name)
        return name


def name_the_stage(diagnosis: Diagnosis, stage_of: dict[str, int | list[int]]) -> Diagnosis:
    """In a pipeline, the rank whose stage made the call where the runs part ways: that call ran there alone
    (or the ranks of its stage, where each stage is tensor parallel)."""
    held = stage_of.get(diagnosis.api or "")
    if diagnosis.verdict != DIVERGENCE or held is None or diagnosis.cause == "ranks":
        return diagnosis
    ranks = held if isinstance(held, list) else [held]
    diagnosis.rank, diagnosis.ranks, diagnosis.alone = ranks[0], list(ranks), len(ranks) == 1
    return diagnosis


# a rank's piece of a value this far (relative, root mean square) from the global run's slice is another value
PIECE_DIFFERS = 1e-4


def name_the_ranks(diagnosis: Diagnosis, npu_folder: Path, bench_folder: Path) -> Diagnosis:
    """In a tensor dump, the ranks whose pieces of the first differing value are not the global run's: each
    piece is compared with the slice of the golden run's tensor it stands for."""
    if diagnosis.verdict != DIVERGENCE or diagnosis.cause == "ranks" or not diagnosis.api:
        return diagnosis
    try:
        npu, bench = read_dump(npu_folder), read_dump(bench_folder)
    except DataFileError:
        return diagnosis
    ours, theirs = npu.data.get(diagnosis.api), bench.data.get(diagnosis.api)
    if npu.task != "tensor" or not isinstance(ours, dict) or not isinstance(theirs, dict):
        return diagnosis
    readers = tensor_readers()

    def array(dump: Dump, leaf: dict) -> np.ndarray | None:
        path = dump.tensor_file(leaf.get("data_name"))
        reader = readers.get(path.suffix) if path is not None else None
        return None if reader is None else np.asarray(reader(path), dtype=np.float64)

    for key in ("input_args", "input_kwargs", "input", "output", "parameters"):
        for ours_leaf, theirs_leaf in _paired_leaves(ours.get(key), theirs.get(key)):
            pieces = ours_leaf.get("pieces")
            if not isinstance(pieces, dict) or "data_name" not in ours_leaf:
                continue
            a, b = array(npu, ours_leaf), array(bench, theirs_leaf)
            if a is None or b is None or a.shape != b.shape:
                continue
            differing = [rank for rank, start, stop in pieces["ranks"] if _differs(a, b, pieces["dim"], start, stop)]
            if differing:
                diagnosis.ranks = differing
                if len(differing) == 1 and len(pieces["ranks"]) > 1:
                    diagnosis.rank, diagnosis.alone = differing[0], True
                return diagnosis
    return diagnosis


def _paired_leaves(ours: Any, theirs: Any) -> list[tuple[dict, dict]]:
    if isinstance(ours, dict) and "shape" in ours and isinstance(theirs, dict):
        return [(ours, theirs)]
    if isinstance(ours, list) and isinstance(theirs, list):
        return [pair for a, b in zip(ours, theirs) for pair in _paired_leaves(a, b)]
    if isinstance(ours, dict) and isinstance(theirs, dict):
        return [pair for key in ours if key in theirs for pair in _paired_leaves(ours[key], theirs[key])]
    return []


def _differs(a: np.ndarray, b: np.ndarray, dim: int, start: int, stop: int) -> bool:
    index = [slice(None)] * a.ndim
    index[dim] = slice(start, stop)
    part, golden = a[tuple(index)], b[tuple(index)]
    if part.size == 0:
        return False
    finite = np.isfinite(part) & np.isfinite(golden)
    if not np.array_equal(np.isfinite(part), np.isfinite(golden)):
        return True
    scale = float(np.sqrt(np.mean(golden[finite] ** 2))) if finite.any() else 0.0
    error = float(np.sqrt(np.mean((part[finite] - golden[finite]) ** 2))) if finite.any() else 0.0
    return error > PIECE_DIFFERS * scale if scale > 0 else error > 0
