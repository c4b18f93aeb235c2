"""The reference's ``.vis`` file: JSON that its TensorBoard plugin (tb-graph-ascend) reads.

A single run is ``{root, dump_data_dir, node, MicroSteps, OverflowCheck}``;
a comparison nests each side as ``NPU`` and ``Bench`` and adds the colour
legend, the metric tooltips and the task.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, BinaryIO

from msprobe.core.compare.metrics import NA
from msprobe.core.compare.rows import Row
from msprobe.core.files import write_new_file
from msprobe.core.graph.compare import GraphComparison, colors, format_value
from msprobe.core.graph.model import Graph, Node

TOOLTIPS = {
    "summary": {
        "Max diff": "Difference of the maxima (debug side minus bench)",
        "Min diff": "Difference of the minima",
        "Mean diff": "Difference of the means",
        "L2norm diff": "Difference of the L2 norms",
    },
    "all": {
        "One Thousandth Err Ratio": "Share of elements whose relative error is below 0.001; closer to 1 is better",
        "Five Thousandths Err Ratio": "Share of elements whose relative error is below 0.005; closer to 1 is better",
        "Cosine": "Cosine similarity of the two tensors; closer to 1 is better",
        "MaxAbsErr": "Largest absolute element difference",
        "MaxRelativeErr": "Largest relative element difference",
    },
    "md5": {"md5": "CRC-32 of the tensor bytes; equal means bitwise identical"},
}


def _scalar_type(row: Row) -> bool:
    return row.dtype in ("int", "float", "bool")


def row_fields(row: Row, framework: str, metrics: dict[str, str] | None = None) -> dict[str, str]:
    """One input or output as the reference writes it in a node's input_data/output_data."""
    if _scalar_type(row):
        value = format_value(row.stats[0])
        fields = {"type": row.dtype, "value": value, "dtype": f"<class {row.dtype}>", "shape": "[]"}
    else:
        fields = {
            "type": "mindspore.Tensor" if framework == "mindspore" else "torch.Tensor",
            "dtype": row.dtype,
            "shape": str(list(row.shape)),
        }
    for key, value in zip(("Max", "Min", "Mean", "Norm"), row.stats):
        fields[key] = format_value(value)
    fields["data_name"] = row.data_name or "-1"
    fields["md5"] = row.md5 or "00000000"
    if metrics:
        fields.update(metrics)
    return fields


def node_fields(node: Node, framework: str, metrics: dict[str, dict[str, str]] | None = None) -> dict[str, Any]:
    metrics = metrics or {}
    fields: dict[str, Any] = {
        "id": node.id,
        "node_type": node.node_type,
        "output_data": {row.name: row_fields(row, framework, metrics.get(row.name)) for row in node.outputs},
        "input_data": {row.name: row_fields(row, framework, metrics.get(row.name)) for row in node.inputs},
        "upnode": node.upnode if node.upnode is not None else "None",
        "subnodes": list(node.subnodes),
        "matched_node_link": list(node.matched_link),
        "suggestions": {},
        "stack_info": list(node.stack_info),
    }
    if node.micro_step_id is not None:
        fields["micro_step_id"] = node.micro_step_id
    fields["data"] = dict(node.data)
    return fields


class NodeFields:
    """A graph's ``node`` mapping, each node's fields made as the file is written: a .vis of a large model never
    holds every node's fields at once (for 50,000 nodes they took a third of a compare's peak memory)."""

    def __init__(self, graph: Graph, metrics: dict[str, dict[str, str]] | None = None):
        self.graph, self.metrics = graph, metrics

    def items(self) -> Iterator[tuple[str, dict[str, Any]]]:
        framework = self.graph.dump.framework
        for node in self.graph.preorder():
            yield node.id, node_fields(node, framework, self.metrics)


def graph_fields(graph: Graph, metrics: dict[str, dict[str, str]] | None = None) -> dict[str, Any]:
    return {"root": graph.root, "dump_data_dir": graph.dump.dump_data_dir, "node": NodeFields(graph, metrics)}


def build_vis(graph: Graph, overflow_check: bool) -> dict[str, Any]:
    content = graph_fields(graph)
    content["MicroSteps"] = graph.micro_steps
    content["OverflowCheck"] = overflow_check
    return content


def compare_vis(npu: Graph, bench: Graph, comparison: GraphComparison, overflow_check: bool) -> dict[str, Any]:
    return {
        "NPU": graph_fields(npu, comparison.metrics),
        "Bench": graph_fields(bench),
        "ToolTip": json.dumps(TOOLTIPS[comparison.task]),
        "Colors": colors(comparison.mode),
        "MicroSteps": npu.micro_steps,
        "task": comparison.task,
        "OverflowCheck": overflow_check,
    }


# the text is written in pieces of about this many characters
_PIECE = 1 << 20


def write_vis(path: Path, content: dict[str, Any]) -> Path:
    """``content`` as JSON, the same bytes ``json.dumps`` gives, each graph's nodes encoded one at a time."""
    encode = json.JSONEncoder(ensure_ascii=False, default=_default).encode

    def write(handle: BinaryIO) -> None:
        pieces: list[str] = []
        size = 0
        for piece in _json_pieces(content, encode):
            pieces.append(piece)
            size += len(piece)
            if size >= _PIECE:
                handle.write("".join(pieces).encode("utf-8"))
                pieces, size = [], 0
        handle.write("".join(pieces).encode("utf-8"))

    return write_new_file(path, write)


def _json_pieces(value: Any, encode: Callable[[Any], str]) -> Iterator[str]:
    """The JSON text of ``value`` in pieces: mappings of the .vis's own making (its top levels, and the nodes,
    made as they are written) piece by piece, anything else whole."""
    if not isinstance(value, (dict, NodeFields)):
        yield encode(value)
        return
    yield "{"
    for index, (key, item) in enumerate(value.items()):
        yield (", " if index else "") + encode(str(key)) + ": "
        if isinstance(item, NodeFields) or (
            isinstance(item, dict) and any(isinstance(inner, NodeFields) for inner in item.values())
        ):
            yield from _json_pieces(item, encode)
        else:
            yield encode(item)
    yield "}"


def _default(value: Any) -> Any:
    return NA if value is None else str(value)
