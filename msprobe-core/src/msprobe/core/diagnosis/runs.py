"""Two runs, as folders: one step and rank each, or sets of step and rank folders.

Over a set, steps are taken in order and the first step where any rank parts ways is the answer's; at that
step the rank whose divergence comes first (forward before backward before the optimizer, then call order) is
named, and "alone" when it is the only one of several. When a step's parameters differ although the step
before agreed and its optimizer calls were not dumped, the difference was made by that optimizer step, and the
answer says so. Once a step has been found noisy ("uncertain"), a later step counts only with evidence that
rounding does not explain (an argument, a call, the data, a weight far off, a first inf or nan).
"""

from __future__ import annotations

import logging
import math
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

from msprobe.core.diagnosis.align import pair_calls
from msprobe.core.diagnosis.analysis import FAR_OFF, PairAnalysis
from msprobe.core.diagnosis.answer import DIVERGENCE, NONE, UNCERTAIN, Diagnosis
from msprobe.core.diagnosis.calls import OPTIMIZER, PHASES, Call, Value, calls_of
from msprobe.core.diagnosis.decide import (
    argument_shown_later,
    carried_state,
    decide,
    latent_argument,
    no_divergence_words,
)
from msprobe.core.diagnosis.explain import arguments_words
from msprobe.core.diagnosis.values import ValueComparer
from msprobe.core.dump.layout import dump_folders, labels_order, step_and_rank_of_labels
from msprobe.core.dump.reader import Dump, read_dump
from msprobe.core.dump.writer import JOURNAL_NAME

logger = logging.getLogger(__name__)

# dump.json bytes (both runs together) the diagnosis reads into memory; it holds about eight times as much. A
# compare diagnoses on its own up to the size it starts to stream at; asked for (--first-divergence), up to more
MAX_DIAGNOSED_BYTES = 512 * 1024 * 1024
COMPARE_DIAGNOSED_BYTES = 64 * 1024 * 1024

Translate = Callable[[str], str]


def _arrays(npu: Dump, bench: Dump) -> Callable[[str, Value], np.ndarray | None] | None:
    """Saved tensors, read with the installed backends' readers, when both dumps are tensor dumps."""
    if npu.task != "tensor" or bench.task != "tensor":
        return None
    from msprobe.core.tensor_files import tensor_readers

    readers = tensor_readers()
    dumps = {"npu": npu, "bench": bench}

    def load(side: str, value: Value) -> np.ndarray | None:
        dump = dumps[side]
        path = dump.tensor_file(value.data_name)
        if path is None:
            return None
        reader = readers.get(path.suffix)
        return None if reader is None else reader(path)

    return load


def diagnosis_fits(*paths: Path, limit: int | None = None) -> tuple[bool, str]:
    """Whether the dumps at ``paths`` (dump.json files or their folders) are small enough to diagnose (within
    ``limit`` bytes of dump.json, ``MAX_DIAGNOSED_BYTES`` by default), and the words to say when they are not."""
    limit = MAX_DIAGNOSED_BYTES if limit is None else limit
    size = 0
    for path in paths:
        if path.is_file():  # a dump.json by any name
            size += path.stat().st_size
            continue
        folder = path if path.is_dir() else path.parent  # a killed run's folder: its journal
        for name in ("dump.json", JOURNAL_NAME):
            if (folder / name).exists():
                size += (folder / name).stat().st_size
                break
    if size <= limit:
        return True, ""
    larger = (
        f"ask for it with --first-divergence (up to {MAX_DIAGNOSED_BYTES / 2**20:.0f} MiB), or "
        if limit < MAX_DIAGNOSED_BYTES
        else ""
    )
    return False, (
        f"not diagnosed: the two dump.json files hold {size / 2**20:.0f} MiB, above the {limit / 2**20:.0f} MiB "
        f"this diagnosis reads; {larger}dump a scope or list and compare that"
    )


def _same_forward(dump: Dump) -> bool:
    """A run of one process, or pipeline stages merged into one: its forward computes as one process does (the
    backward may not: a stage's input is a leaf there, and its gradient adds up in another order)."""
    merged = (dump.parallel or {}).get("merged_ranks")
    return not merged or bool((dump.parallel or {}).get("pipeline_stages"))


def diagnose_dumps(
    npu: Dump, bench: Dump, translate: Translate | None = None, settled: bool = True, other_layout: bool = False
) -> tuple[Diagnosis, PairAnalysis]:
    """One step and rank of each run, already read (``settled``: the steps before agreed bit for bit;
    ``other_layout``: the runs were laid out otherwise, and a dump is the merge of a sharded run's ranks)."""
    if translate is None and npu.data == bench.data and npu.construct == bench.construct:
        # the same entries, value for value (two runs of one machine, the same script): nothing to trace
        found = Diagnosis(NONE, detail=no_divergence_words(len(npu.data), 0), compared=len(npu.data))
        return found, PairAnalysis.identical(npu)
    ours, theirs = calls_of(npu), calls_of(bench)
    analysis = PairAnalysis(ours, theirs, pair_calls(ours, theirs, translate), ValueComparer(_arrays(npu, bench)))
    analysis.other_layout = other_layout
    analysis.exact_forward = other_layout and _same_forward(npu) and _same_forward(bench)
    if npu.batch is not None and bench.batch is not None and npu.batch != bench.batch:
        # one request from batches of other sizes: the batch's sizes are arguments, and a matrix product of
        # another height may round otherwise, as a run laid out otherwise does
        analysis.batches = (npu.batch, bench.batch)
        analysis.other_layout = True
    return decide(analysis, settled), analysis


def diagnose_pair(npu_folder: str | Path, bench_folder: str | Path, translate: Translate | None = None) -> Diagnosis:
    """One step and rank of each run: two folders holding dump.json (or the dump.json files)."""
    npu = read_dump(npu_folder)
    found = diagnose_dumps(npu, read_dump(bench_folder), translate)[0]
    found.step, found.rank = step_and_rank_of(npu.folder)
    return found


def step_and_rank_of(folder: Path) -> tuple[int | None, int | None]:
    """``.../step3/rank1`` -> (3, 1); what a folder outside that layout does not say is None."""
    folder = Path(folder)
    if folder.name.startswith(("rank", "proc")):
        return step_and_rank_of_labels((folder.parent.name, folder.name))
    return step_and_rank_of_labels((folder.name,))


def _first_in_run(found: Diagnosis, analysis: PairAnalysis) -> tuple:
    order = next((call.order for call in analysis.ours if call.name == found.api), len(analysis.ours))
    return (PHASES.index(found.phase) if found.phase in PHASES else len(PHASES), order)


def _has_optimizer_calls(analysis: PairAnalysis) -> bool:
    return any(call.phase == OPTIMIZER for call in analysis.calls())


def _exact_evidence(found: Diagnosis) -> bool:
    """What rounding does not explain, after a step already found noisy."""
    if found.verdict != DIVERGENCE:
        return False
    if found.nonfinite or found.cause in ("argument", "calls", "data", "inplace"):
        return True
    error = found.error
    return found.cause == "weights" and error is not None and math.isfinite(error) and error > FAR_OFF


def diagnose_runs(
    npu_root: str | Path, bench_root: str | Path, translate: Translate | None = None, other_layout: bool = False
) -> Diagnosis:
    """The first (step, rank) where two runs part ways, over whatever the two paths hold."""
    npu_folders = dump_folders(Path(npu_root), "npu_path")
    bench_folders = dump_folders(Path(bench_root), "bench_path")
    shared = [labels for labels in sorted(npu_folders, key=labels_order) if labels in bench_folders]
    if not shared:
        only = sorted(" ".join(k) or "(single)" for k in set(npu_folders) ^ set(bench_folders))
        from msprobe.core.errors import DataFileError

        raise DataFileError(Path(npu_root), f"no step/rank folder in common with {bench_root}: {', '.join(only)}")
    by_step: dict[int | None, list[tuple[int | None, Path, Path]]] = {}
    for labels in shared:
        step, rank = step_and_rank_of_labels(labels)
        if step is None or rank is None:  # a folder given at a step or a rank says the rest by its name
            named_step, named_rank = step_and_rank_of(npu_folders[labels])
            step, rank = (named_step if step is None else step), (named_rank if rank is None else rank)
        by_step.setdefault(step, []).append((rank, npu_folders[labels], bench_folders[labels]))
    noisy: Diagnosis | None = None  # the first step found to differ everywhere by rounding
    compared = unpaired = 0
    previous: dict[int | None, PairAnalysis] = {}
    previous_step: int | None = None
    latent: dict[int | None, tuple[Any, Call, str]] = {}  # rank -> its first argument with no effect yet
    for step, ranks in by_step.items():
        found_here: list[tuple[tuple, int | None, Diagnosis, PairAnalysis]] = []
        analyses: dict[int | None, PairAnalysis] = {}
        uncertain_here: Diagnosis | None = None
        for rank, npu_folder, bench_folder in ranks:
            fits, why = diagnosis_fits(npu_folder, bench_folder)
            if not fits:
                return Diagnosis(UNCERTAIN, step=step, rank=rank, detail=why, confidence="low")
            found, analysis = diagnose_dumps(
                read_dump(npu_folder), read_dump(bench_folder), translate, noisy is None, other_layout
            )
            analyses[rank] = analysis
            compared += found.compared
            unpaired += analysis.unpaired
            found.step, found.rank = step, rank
            if found.verdict == NONE and noisy is None:
                shown = _latent_argument_shown(latent, analysis, step, rank)
                if shown is not None:
                    shown.compared = compared
                    return shown
            if found.verdict == UNCERTAIN:
                uncertain_here = uncertain_here or found
            elif found.verdict == DIVERGENCE and (noisy is None or _exact_evidence(found)):
                found_here.append((_first_in_run(found, analysis), rank, found, analysis))
        if found_here:
            found_here.sort(key=lambda item: (item[0], item[1] if item[1] is not None else -1))
            _, rank, found, analysis = found_here[0]
            _name_ranks(found, [item[2] for item in found_here[1:]], len(ranks))
            _blame_optimizer(found, analysis, previous.get(rank), previous_step)
            if noisy is not None or uncertain_here is not None:
                found.confidence = "high" if found.confidence == "exact" else found.confidence
            found.compared = compared
            return found
        noisy = noisy or uncertain_here
        previous, previous_step = analyses, step
    if noisy is not None:
        noisy.compared = compared
        return noisy
    return Diagnosis(NONE, detail=no_divergence_words(compared, unpaired), compared=compared)


def _latent_argument_shown(
    latent: dict[int | None, tuple[Any, Call, str]], analysis: PairAnalysis, step: Any, rank: int | None
) -> Diagnosis | None:
    """In a step whose outputs all agree: the first call given another argument, from an earlier step, when a
    call of the same name is given tensors that differ here; ``latent`` keeps the first per rank (the call
    and its argument's words, not its step's dumps)."""
    if rank not in latent:
        call = latent_argument(analysis) if analysis.ours else None
        if call is not None:
            latent[rank] = (step, call, arguments_words(analysis.difference(call).changed_arguments))
        return None  # what it wrote shows in a later step
    latent_step, call, words = latent[rank]
    reader = carried_state(analysis, call.name)
    if reader is None:
        return None
    found = argument_shown_later(call, words, analysis, reader, step)
    found.step, found.rank = latent_step, rank
    return found


def _name_ranks(found: Diagnosis, others: list[Diagnosis], ranks: int) -> None:
    """The ranks that part ways at this step; "alone" when the others do only through a collective (their
    first difference is a Distributed call's, after this rank's), or not at all."""
    found.ranks = [d.rank for d in (found, *others) if d.rank is not None]
    if ranks < 2 or found.rank is None:
        return
    followers = [d for d in others if d.api and d.api.startswith("Distributed.")]
    found.alone = len(followers) == len(others)
    found.followers = [d.rank for d in followers if d.rank is not None]
    if followers:
        names = ", ".join(str(d.rank) for d in followers)
        collectives = "/".join(sorted({d.api.split(".")[1] for d in followers if d.api}))
        who = f"ranks {names} follow" if len(followers) > 1 else f"rank {names} follows"
        found.detail = _join(found.detail, f"{who} through Distributed.{collectives}")


def _calls(count: int) -> str:
    return f"{count} call" if count == 1 else f"{count} calls"


def _join(*parts: str) -> str:
    return "; ".join(part for part in parts if part)


def _blame_optimizer(found: Diagnosis, analysis: PairAnalysis, before: PairAnalysis | None, step: Any) -> None:
    """A step whose weights differ first, after a step that agreed without dumping its optimizer, or whose
    dumped optimizer calls one run makes and the other does not: that optimizer step made the difference."""
    if found.phase != "forward" or before is None or step is None:
        return
    missing = [call for call in before.pairing.missing if call.phase == OPTIMIZER]
    extra = [call for call in before.pairing.extra if call.phase == OPTIMIZER]
    # a parameter the optimizer left alone is no parameter to the next step's dump: it looks like data, or
    # like the output of code no dump records
    if found.cause != "weights" and not (found.cause in ("data", "undumped") and (missing or extra)):
        return
    weights = f"step {found.step}'s parameters of {found.module or 'the model'} differ"
    if _has_optimizer_calls(before):
        if not (missing or extra):
            found.detail = _join(found.detail, f"step {step}'s optimizer calls agree, so they changed after them")
            return
        # the optimizer skips a parameter the other run's updates (frozen, or given no gradient), or the reverse
        first = (missing or extra)[0]
        fewer = f"{_calls(len(missing))} the benchmark's makes and this run's does not" if missing else ""
        more = f"{_calls(len(extra))} the benchmark's does not make" if extra else ""
        found.detail = _join(
            f"step {step}'s optimizer makes {' and '.join(filter(None, (fewer, more)))} (the first: {first.name})",
            "a parameter one run updates and the other does not (frozen, or given no gradient), or an optimizer "
            "set up otherwise",
            weights,
        )
        found.step, found.phase, found.cause, found.api = step, OPTIMIZER, "optimizer", first.name
        return
    found.detail = weights
    found.step, found.phase, found.cause = step, OPTIMIZER, "optimizer"
    found.api = None


__all__ = ["Call", "diagnose_dumps", "diagnose_pair", "diagnose_runs", "diagnosis_fits", "step_and_rank_of"]
