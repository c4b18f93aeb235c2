"""What ``msprobe graph -i compare.json -o OUT`` does.

The layout of ``npu_path`` picks the mode, as in the reference: a folder with
dump.json is one graph; a folder of ``rank*`` folders is one graph per rank;
a folder of ``step*`` folders is one per step and rank. With ``bench_path``
each graph is compared with its bench twin. Every graph is written as the
reference's ``.vis`` file and as a self-contained ``.html`` page.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict

from msprobe.core.compare.mapping import NameMapper, read_layer_mapping
from msprobe.core.compare.report import timestamp
from msprobe.core.compare.run import check_tensor_readers, read_compare_json
from msprobe.core.compare.tables import tensor_loader
from msprobe.core.diagnosis import diagnose_dumps, diagnosis_fits
from msprobe.core.diagnosis.runs import step_and_rank_of
from msprobe.core.dump.layout import dump_folders
from msprobe.core.dump.reader import read_dump
from msprobe.core.errors import DataFileError
from msprobe.core.graph.compare import compare_graphs, is_suspect
from msprobe.core.graph.html import write_build_page, write_compare_page
from msprobe.core.graph.model import Graph, build_graph
from msprobe.core.graph.overflow import mark_overflow
from msprobe.core.graph.vis import build_vis, compare_vis, write_vis
from msprobe.core.jobs import Engine, note, run_jobs
from msprobe.core.tensor_files import tensor_readers

logger = logging.getLogger(__name__)


class GraphInput(BaseModel):
    """compare.json for the graph command: bench_path is optional (a single graph is built)."""

    model_config = ConfigDict(extra="forbid")
    npu_path: str
    bench_path: str | None = None
    is_print_compare_log: bool = True


@dataclass
class GraphSummary:
    label: str
    nodes: int
    matched: int | None = None
    suspect: int = 0
    first_suspect: str | None = None  # the call where the runs part ways
    answer: str | None = None  # the diagnosis's line
    overflow: int = 0
    files: list[Path] = field(default_factory=list)

    def line(self) -> str:
        where = f"{self.label}: " if self.label else ""
        if self.matched is None:
            text = f"{where}built a graph of {self.nodes} nodes"
        else:
            text = (
                f"{where}compared {self.nodes} nodes, {self.matched} matched, {self.nodes - self.matched} unmatched, "
                f"{self.suspect} precision suspect"
            )
            if self.answer:
                text += f"; {self.answer}"
        if self.overflow:
            text += f"; {self.overflow} node(s) with an overflow level"
        return text


def read_graph_input(path: str | Path) -> GraphInput:
    return read_compare_json(path, GraphInput)


def _load(folder: Path, complete_stack: bool) -> Graph:
    dump = read_dump(folder)
    if not dump.construct:
        logger.warning(
            "%s: construct.json is empty (level L1?); APIs are shown without their modules", folder / "construct.json"
        )
    return build_graph(dump, complete_stack)


def _translator(npu: Graph, bench: Graph, layer_mapping: str | Path | None) -> Any:
    cross = bool(npu.dump.framework and bench.dump.framework and npu.dump.framework != bench.dump.framework)
    mapper = NameMapper(cross_framework=cross) if cross else None
    renames = read_layer_mapping(layer_mapping) if layer_mapping else {}
    if mapper is None and not renames:
        return None

    def translate(name: str) -> str:
        if mapper is not None:
            name = mapper(name)
        if renames and name.startswith(("Module.", "Cell.")):
            head, *parts = name.split(".")
            name = ".".join([head, *(renames.get(part, part) for part in parts)])
        return name

    return translate


def _file_stem(kind: str, labels: tuple[str, ...], stamp: str) -> str:
    return "_".join([kind, *labels, stamp])


def build_one(
    folder: Path, output: Path, labels: tuple[str, ...], stamp: str, overflow_check: bool, complete_stack: bool
) -> GraphSummary:
    note(f"reading {folder}")
    graph = _load(folder, complete_stack)
    overflow_check = overflow_check or graph.dump.task == "overflow_check"
    marked = mark_overflow(graph) if overflow_check else 0
    stem = _file_stem("build", labels, stamp)
    note(f"writing the graph of {len(graph.nodes)} nodes")
    vis = write_vis(output / f"{stem}.vis", build_vis(graph, overflow_check))
    page = write_build_page(output / f"{stem}.html", graph, f"msprobe graph: {folder}", overflow_check)
    return GraphSummary(" ".join(labels), len(graph.nodes), overflow=marked, files=[vis, page])


def compare_one(
    npu_folder: Path,
    bench_folder: Path,
    output: Path,
    labels: tuple[str, ...],
    stamp: str,
    fuzzy: bool,
    layer_mapping: str | Path | None,
    overflow_check: bool,
    complete_stack: bool,
    layout: tuple | None = None,
) -> GraphSummary:
    """``layout``: runs of other layouts, merged: what the merge found (findings, places, ranks), which the
    answer weighs as ``msprobe compare``'s does."""
    note(f"reading {npu_folder}")
    npu = _load(npu_folder, complete_stack)
    note(f"reading {bench_folder}")
    bench = _load(bench_folder, complete_stack)
    readers = tensor_readers()
    check_tensor_readers((npu.dump, bench.dump), readers)
    cross = bool(npu.dump.framework and bench.dump.framework and npu.dump.framework != bench.dump.framework)
    translate = _translator(npu, bench, layer_mapping)
    note(f"matching and scoring {len(npu.nodes)} nodes")
    comparison = compare_graphs(npu, bench, fuzzy, translate, tensor_loader(readers), ignore_classes=cross)
    overflow_check = overflow_check or npu.dump.task == "overflow_check"
    marked = mark_overflow(npu) if overflow_check else 0
    if overflow_check:
        mark_overflow(bench)
    stem = _file_stem("compare", labels, stamp)
    note("writing the .vis")
    vis = write_vis(output / f"{stem}.vis", compare_vis(npu, bench, comparison, overflow_check))
    title = f"msprobe graph: {npu_folder} vs {bench_folder}"
    diagnosis = None  # the answer every surface gives; the page marks it
    if diagnosis_fits(npu_folder, bench_folder)[0]:
        note("finding where the runs part ways")
        diagnosis = diagnose_dumps(npu.dump, bench.dump, translate, other_layout=layout is not None)[0]
        diagnosis.step, diagnosis.rank = step_and_rank_of(npu_folder)
        if layout is not None:
            from msprobe.core.parallel.runs import first_answer, name_the_ranks, name_the_stage

            findings, places, ranks, stage_of = layout
            diagnosis = name_the_ranks(first_answer(diagnosis, findings, places, ranks), npu_folder, bench_folder)
            diagnosis = name_the_stage(diagnosis, stage_of)
    note("writing the page")
    page = write_compare_page(output / f"{stem}.html", npu, bench, comparison, title, overflow_check, diagnosis)
    suspect = sum(1 for node in npu.nodes.values() if is_suspect(comparison.mode, node.data.get("precision_index")))
    return GraphSummary(
        " ".join(labels),
        len(npu.nodes),
        matched=len(comparison.matches),
        suspect=suspect,
        answer=diagnosis.line() if diagnosis is not None else None,
        first_suspect=diagnosis.api if diagnosis is not None and diagnosis.verdict == "divergence" else None,
        overflow=marked,
        files=[vis, page],
    )


def write_answered_page(npu_folder: Path, bench_folder: Path, path: Path, title: str, diagnosis: Any) -> Path:
    """The compare page of two dump folders, marked with an answer found elsewhere (``diagnosis``) rather than by
    diagnosing the dumps: a check whose evidence the dumps do not hold (a float64 replay) shows its answer here."""
    npu, bench = _load(npu_folder, False), _load(bench_folder, False)
    comparison = compare_graphs(npu, bench)
    return write_compare_page(path, npu, bench, comparison, title, False, diagnosis)


def _build_job(job: tuple) -> GraphSummary:
    return build_one(*job)


def _compare_job(job: tuple) -> GraphSummary:
    return compare_one(*job)


def run_graph(
    compare_json: str | Path,
    output_path: str | Path,
    layer_mapping: str | Path | None = None,
    fuzzy_match: bool = False,
    overflow_check: bool = False,
    complete_stack: bool = False,
    engine: Engine | None = None,
) -> list[GraphSummary]:
    """Build or compare every graph the paths hold (each step/rank one job, run on ``engine``)."""
    spec = read_graph_input(compare_json)
    output = Path(output_path)
    if output.exists() and not output.is_dir():
        raise DataFileError(output, "the output path is a file; give a folder")
    npu = dump_folders(Path(spec.npu_path), "npu_path")
    stamp = timestamp()
    engine = engine or Engine(workers=1)
    if spec.bench_path is None:
        jobs = [(f, output, labels, stamp, overflow_check, complete_stack) for labels, f in npu.items()]
        return run_jobs(_build_job, jobs, engine, "graphs")
    from msprobe.core.parallel.runs import prepare

    prepared = prepare(Path(spec.npu_path), Path(spec.bench_path), output)  # runs of other layouts: merged
    if prepared.merged:
        logger.warning("msprobe graph: ranks merged: %s", prepared.words)
        npu = dump_folders(prepared.npu, "npu_path")
    bench = dump_folders(prepared.bench, "bench_path")
    if set(npu) != set(bench):
        only = sorted(" ".join(k) or "(single)" for k in set(npu) ^ set(bench))
        raise DataFileError(
            Path(compare_json), f"npu_path and bench_path hold different step/rank folders: {', '.join(only)}"
        )
    jobs = []
    for labels, folder in sorted(npu.items()):
        step = step_and_rank_of(folder)[0]
        layout = None
        if prepared.merged:
            layout = (
                prepared.findings.get(step, []), prepared.places.get(step, {}), prepared.ranks,
                prepared.stage_of.get(step, {}),
            )  # fmt: skip
        jobs.append((
            folder, bench[labels], output, labels, stamp, fuzzy_match, layer_mapping, overflow_check,
            complete_stack, layout,
        ))  # fmt: skip
    return run_jobs(_compare_job, jobs, engine, "graphs")
