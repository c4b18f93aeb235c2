"""Where two runs first part ways: ``msprobe compare --first-divergence``.

Two answers, both from the compare's own numbers and the reference's
tolerance bands (``is_suspect``, the bands the graph page colours by):

- the first divergent entry in execution order, forward entries before
  backward ones (dump.json lists entries in the order calls ended);
- walking construct.json's hierarchy from the root, the innermost module
  whose outputs diverge while its inputs still agree, and the first
  divergent API inside it. A module whose inputs already differ only
  passes on a divergence that began before it, so it is stepped over.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from msprobe.core.graph.compare import (
    GraphComparison,
    _float,
    _scaled_error,
    compare_graphs,
    is_suspect,
)
from msprobe.core.graph.model import API, MODULE, Graph, Node


@dataclass
class Divergence:
    mode: str
    first_entry: str | None  # the first divergent dump.json entry, forward before backward
    module: str | None  # the innermost module that turns agreeing inputs into diverging outputs
    api: str | None  # the first divergent API inside that module (or the first entry when no module is found)
    matched: int = 0

    def line(self) -> str:
        if self.first_entry is None:
            return f"first divergence: none ({self.matched} matched entries agree, {self.mode} mode)"
        if self.module is None:
            return f"first divergence: {self.first_entry} (no module turns agreeing inputs into diverging outputs)"
        return f"first divergence: {self.module} (its inputs agree, its outputs differ), first API {self.api}"

    def as_dict(self) -> dict[str, Any]:
        return {"mode": self.mode, "first_entry": self.first_entry, "module": self.module, "api": self.api}


def _is_forward(name: str) -> bool:
    return name.endswith(".forward") or ".forward." in name


def diverges(comparison: GraphComparison, node: Node) -> bool:
    return is_suspect(comparison.mode, node.data.get("precision_index"))


def inputs_agree(comparison: GraphComparison, node: Node) -> bool:
    """Every input the call was given (not its own parameters, which may be where it went wrong) that was
    compared lies within the lightest band."""
    mode = comparison.mode
    for row in node.inputs:
        if row.role != "input":
            continue
        if mode == "md5":
            if comparison.metrics.get(row.name, {}).get("Result") == "Different":
                return False
        elif mode == "tensor":
            ratio = _float(comparison.metrics.get(row.name, {}).get("One Thousandth Err Ratio"))
            if ratio is not None and is_suspect(mode, 1 - ratio):
                return False
        else:
            partner = comparison.partners.get(row.name)
            error = _scaled_error(row, partner) if partner is not None else None
            if error is not None and is_suspect(mode, min(error, 1.0)):
                return False
    return True


def _preorder(graph: Graph, top: Node) -> list[Node]:
    ordered, pending = [], [top]
    while pending:  # parents before children, children in call order
        node = pending.pop()
        ordered.append(node)
        pending.extend(graph[child] for child in reversed(node.subnodes))
    return ordered


def _starts_divergence(comparison: GraphComparison, node: Node) -> bool:
    return (
        node.node_type == MODULE
        and _is_forward(node.id)
        and node.matched is not None
        and diverges(comparison, node)
        and inputs_agree(comparison, node)
    )


def _first_divergent_api(graph: Graph, comparison: GraphComparison, top: Node) -> str | None:
    for node in _preorder(graph, top):
        if node.node_type == API and node.matched and diverges(comparison, node):
            return node.id
    return None


def locate(npu: Graph, comparison: GraphComparison) -> Divergence:
    """Both answers for an already compared pair of graphs (``npu`` scored in place by compare_graphs)."""
    order = [name for name in npu.dump.data if name in npu.nodes]
    divergent = [name for name in order if npu[name].matched and diverges(comparison, npu[name])]
    forward = [name for name in divergent if _is_forward(name)]
    first_entry = (forward or divergent or [None])[0]
    # the first module in call order that starts a divergence, then the first one inside it that does, and so
    # on down: a container whose output is within the band (a residual dilutes the change) is looked inside
    module = None
    scope = _preorder(npu, npu[npu.root])[1:]
    while True:
        culprit = next((node for node in scope if _starts_divergence(comparison, node)), None)
        if culprit is None:
            break
        module = culprit.id
        scope = _preorder(npu, culprit)[1:]
    api = _first_divergent_api(npu, comparison, npu[module]) if module is not None else first_entry
    return Divergence(comparison.mode, first_entry, module, api, len(comparison.matches))


def first_divergence(npu_folder: str | Path, bench_folder: str | Path, fuzzy: bool = False) -> Divergence:
    """Compare two dump folders as the graph does and locate where they first part ways."""
    from msprobe.core.graph.api import _load, _translator, tensor_loader, tensor_readers

    npu, bench = _load(Path(npu_folder), False), _load(Path(bench_folder), False)
    readers = tensor_readers()
    cross = bool(npu.dump.framework and bench.dump.framework and npu.dump.framework != bench.dump.framework)
    comparison = compare_graphs(
        npu, bench, fuzzy, _translator(npu, bench, None), tensor_loader(readers), ignore_classes=cross
    )
    return locate(npu, comparison)


def locate_pairs(
    compare_json: str | Path, output: str | Path, fuzzy: bool = False
) -> list[tuple[str, Divergence, Path]]:
    """``compare --first-divergence``: each pair of compare.json (one, or one per rank), located and written
    to ``first_divergence_[rankN_]{timestamp}.json``; a label ("rank 1: ") for each."""
    from msprobe.core.compare.api import _rank_folders, read_compare_json
    from msprobe.core.compare.report import timestamp
    from msprobe.core.dump.writer import write_json_atomic

    spec = read_compare_json(compare_json)
    npu, bench = Path(spec.npu_path), Path(spec.bench_path)
    npu, bench = (npu.parent, bench.parent) if npu.is_file() else (npu, bench)
    if (npu / "dump.json").exists() or (npu / ".dump.json.journal").exists():
        pairs = [("", npu, bench)]
    else:
        npu_ranks, bench_ranks = _rank_folders(npu), _rank_folders(bench)
        pairs = [(rank, npu_ranks[rank], bench_ranks[rank]) for rank in sorted(set(npu_ranks) & set(bench_ranks))]
    stamp = timestamp()
    found = []
    for rank, npu_folder, bench_folder in pairs:
        divergence = first_divergence(npu_folder, bench_folder, fuzzy)
        number = rank[len("rank") :]
        name = f"first_divergence_rank{number}_{stamp}.json" if number else f"first_divergence_{stamp}.json"
        path = Path(output) / name
        write_json_atomic(path, divergence.as_dict())
        found.append((f"rank {number}: " if number else "", divergence, path))
    return found
