"""A single self-contained web page of a graph: the data and the viewer in one file, nothing fetched.

The page keeps the tree (names, parents, colours) in one JSON block and draws
only the rows in view, so a model of tens of thousands of nodes opens at once:
collapsed parts are never laid out. A node's inputs, outputs and stack are
what weighs; they sit in gzip-compressed chunks of ``DETAIL_CHUNK`` nodes that
the browser unpacks only when a node of that chunk is selected.
"""

from __future__ import annotations

import base64
import gzip
import json
from pathlib import Path
from typing import Any

from msprobe.core.diagnosis import Diagnosis
from msprobe.core.files import write_new_text
from msprobe.core.graph.compare import BANDS, UNMATCHED_COLOR, GraphComparison, band, colors, is_suspect
from msprobe.core.graph.divergence import located_nodes
from msprobe.core.graph.model import Graph
from msprobe.core.graph.vis import row_fields
from msprobe.core.pages import fill, html_text, script_json

OVERFLOW_COLORS = {"critical": "#FF704D", "high": "#FFC62E", "medium": "#FFEDBE"}
DETAIL_CHUNK = 256  # nodes per compressed chunk: one unpack per click stays a few milliseconds


def _packed(details: list[list[Any]]) -> list[str]:
    """Each chunk as base64 of gzip of its JSON; ``mtime=0`` keeps pages byte-identical across runs."""
    chunks = []
    for start in range(0, len(details), DETAIL_CHUNK):
        text = json.dumps(details[start : start + DETAIL_CHUNK], ensure_ascii=False, separators=(",", ":"))
        chunks.append(base64.b64encode(gzip.compress(text.encode("utf-8"), compresslevel=6, mtime=0)).decode("ascii"))
    return chunks


def _side(
    graph: Graph,
    label: str,
    comparison: GraphComparison | None,
    metrics: dict | None,
    located: dict[str, str] | None = None,
) -> dict[str, Any]:
    """``located``: node id -> "module" or "api", where the diagnosis says the runs part ways."""
    ordered = graph.preorder()
    index = {node.id: position for position, node in enumerate(ordered)}
    framework = graph.dump.framework
    nodes, details = [], []
    for node in ordered:
        entry: dict[str, Any] = {
            "n": node.id,
            "t": node.node_type,
            "p": index.get(node.upnode, -1) if node.upnode else -1,
            "c": [index[child] for child in node.subnodes],
        }
        details.append(
            [
                {row.name: row_fields(row, framework, (metrics or {}).get(row.name)) for row in node.inputs},
                {row.name: row_fields(row, framework, (metrics or {}).get(row.name)) for row in node.outputs},
                node.stack_info,
            ]
        )
        level = node.data.get("overflow_level")
        if level:
            entry["o"] = level
            entry["k"] = OVERFLOW_COLORS[level]
        if comparison is not None:
            entry["m"] = node.matched
            score = node.data.get("precision_index")
            if node.matched is None:
                entry["u"] = 1
                entry["k"] = UNMATCHED_COLOR
            elif score is not None:
                entry["x"] = score
                entry.setdefault("k", band(comparison.mode, score))
                if is_suspect(comparison.mode, score):
                    entry["z"] = 1
        if located and node.id in located:
            entry["d"] = located[node.id]
        nodes.append(entry)
    return {"label": label, "nodes": nodes, "details": _packed(details)}


def _legend(comparison: GraphComparison | None, overflow: bool) -> list[list[str]]:
    legend: list[list[str]] = []
    if comparison is not None:
        for color, spec in colors(comparison.mode).items():
            bounds = spec["value"]
            if color == UNMATCHED_COLOR:
                text = "unmatched"
            elif comparison.mode == "md5":
                text = "md5 equal" if bounds[0] == 1 else "md5 differs"
            else:
                text = f"{bounds[0]} to {bounds[1]}"
            legend.append([color, text])
        legend.append(["#FFFFFF", f"suspect: {_suspect_text(comparison.mode)}"])
    if overflow:
        legend += [[color, f"overflow {level}"] for level, color in OVERFLOW_COLORS.items()]
    return legend


def _suspect_text(mode: str) -> str:
    if mode == "md5":
        return "any md5 differs"
    return f"precision_index >= {BANDS[mode][0][1][1]}"


def page(title: str, info: str, sides: list[dict[str, Any]], legend: list[list[str]], answer: str = "") -> str:
    details = {"chunk": DETAIL_CHUNK, "sides": [side.pop("details") for side in sides]}
    data = script_json({"title": title, "info": info, "sides": sides, "legend": legend, "answer": answer})
    fields = {"TITLE": html_text(title), "DETAILS": script_json(details, compact=True), "DATA": data}
    return fill("msprobe.core.graph", "assets/graph.html", fields)


def write_build_page(path: Path, graph: Graph, title: str, overflow: bool) -> Path:
    info = f"{len(graph.nodes)} nodes, {graph.micro_steps} micro-step(s), {graph.dump.task or 'unknown'} dump"
    sides = [_side(graph, "Debug side", None, None)]
    return write_new_text(path, page(title, info, sides, _legend(None, overflow)))


def write_compare_page(
    path: Path,
    npu: Graph,
    bench: Graph,
    comparison: GraphComparison,
    title: str,
    overflow: bool,
    diagnosis: Diagnosis | None = None,
) -> Path:
    matched = len(comparison.matches)
    info = (
        f"{comparison.mode} compare: {len(npu.nodes)} nodes, {matched} matched, "
        f"{len(npu.nodes) - matched} unmatched on the debug side"
    )
    answer = diagnosis.line() if diagnosis is not None else ""
    if answer:
        info += f"; {answer}"
    sides = [
        _side(npu, "Debug side", comparison, comparison.metrics, located_nodes(npu, diagnosis)),
        _side(bench, "Bench side", comparison, None),
    ]
    return write_new_text(path, page(title, info, sides, _legend(comparison, overflow), answer))
