"""Overflow levels of graph nodes, from the statistics each input and output carries.

- ``critical``: every input is finite, some output holds inf or nan: this node made it.
- ``high``: inputs and outputs both hold inf or nan, or the output norm jumps
  more than ``NORM_JUMP`` times above the largest input norm.
- ``medium``: an input holds inf or nan but the outputs are finite.
"""

from __future__ import annotations

import math

from msprobe.core.compare.rows import Row
from msprobe.core.graph.model import Graph, Node

NORM_JUMP = 1e4


def _abnormal(rows: list[Row]) -> bool:
    for row in rows:
        for value in row.stats:
            if isinstance(value, (int, float)) and not math.isfinite(value):
                return True
    return False


def _largest_norm(rows: list[Row]) -> float:
    norms = [row.stats[3] for row in rows if isinstance(row.stats[3], (int, float)) and math.isfinite(row.stats[3])]
    return max(norms, default=0.0)


def overflow_level(node: Node) -> str | None:
    bad_in, bad_out = _abnormal(node.inputs), _abnormal(node.outputs)
    if bad_out and not bad_in:
        return "critical"
    if bad_out and bad_in:
        return "high"
    if bad_in:
        return "medium"
    input_norm = _largest_norm(node.inputs)
    if input_norm > 0 and _largest_norm(node.outputs) > NORM_JUMP * input_norm:
        return "high"
    return None


def mark_overflow(graph: Graph) -> int:
    """Store ``overflow_level`` on every node that has one; returns how many do."""
    marked = 0
    for node in graph.nodes.values():
        level = overflow_level(node) if node.has_data else None
        if level:
            node.data["overflow_level"] = level
            marked += 1
    return marked
