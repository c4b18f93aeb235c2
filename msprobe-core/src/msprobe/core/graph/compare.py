"""Matching two graphs node by node and scoring each matched node.

A node matches when the bench graph holds a node of the same name (after
layer or cross-framework mapping) under the matched parent, with the same
number of inputs and outputs and the same shapes. With ``fuzzy`` the call
count of an API is ignored: the k-th ``Functional.linear`` inside a matched
module pairs with the k-th one on the bench side.

Values are compared with the compare engine's own tables, so a node's
numbers are the same as the rows of ``msprobe compare``. Each node then gets
the reference's ``precision_index``: in statistics mode the largest relative
error of its outputs' statistics (capped at 1; a statistic smaller than the
tensor's RMS is measured against the RMS, so near-zero means do not score
1 for rounding noise); in tensor mode how much the
smallest One Thousandth Err Ratio drops from inputs to outputs; in md5 mode 1
when every value is identical and 0 otherwise.
"""

from __future__ import annotations

import math
from collections import Counter, defaultdict
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from msprobe.core.compare.metrics import NA
from msprobe.core.compare.rows import Row
from msprobe.core.compare.tables import (
    STATISTICS_METRICS,
    TENSOR_METRICS,
    TensorLoader,
    detect_mode,
    md5_table,
    statistics_table,
    tensor_table,
)
from msprobe.core.distance import statistics_distance
from msprobe.core.dump.entry_names import parse_entry
from msprobe.core.graph.model import API, API_GROUP, Graph, Node

# The reference's colour bands per mode: (colour, [low, high], legend text).
_STATISTICS_TEXT = (
    "Largest relative error of this node's output statistics, |(value - bench) / bench|; darker is further off"
)
_TENSOR_TEXT = (
    "Drop of the smallest One Thousandth Err Ratio from this node's inputs to its outputs; darker is a larger drop"
)
UNMATCHED_COLOR = "#C7C7C7"
BANDS = {
    "statistics": [
        ("#FFFCF3", [0, 0.2]),
        ("#FFEDBE", [0.2, 0.4]),
        ("#FFDC7F", [0.4, 0.6]),
        ("#FFC62E", [0.6, 0.8]),
        ("#FF704D", [0.8, 1]),
    ],
    "tensor": [
        ("#FFFCF3", [0, 0.05]),
        ("#FFEDBE", [0.05, 0.1]),
        ("#FFDC7F", [0.1, 0.15]),
        ("#FFC62E", [0.15, 0.2]),
        ("#FF704D", [0.2, 1]),
    ],
    "md5": [("#FFFCF3", [1, 1]), ("#FF704D", [0, 0])],
}
# Reference's task names in the .vis file.
VIS_TASK = {"statistics": "summary", "tensor": "all", "md5": "md5"}


def colors(mode: str) -> dict[str, dict[str, Any]]:
    """The .vis ``Colors`` legend for a mode."""
    text = {"statistics": _STATISTICS_TEXT, "tensor": _TENSOR_TEXT}.get(mode)
    legend: dict[str, dict[str, Any]] = {}
    for color, bounds in BANDS[mode]:
        if mode == "md5":
            description = "Every input and output has the bench's md5" if bounds[0] == 1 else "Some md5 differs"
        else:
            description = text or ""
        legend[color] = {"value": bounds, "description": description}
    legend[UNMATCHED_COLOR] = {"value": [], "description": "No matching node on the other side"}
    return legend


def band(mode: str, index: float | None) -> str:
    """The colour of a precision_index; unmatched nodes (None) are grey."""
    if index is None:
        return UNMATCHED_COLOR
    if mode == "md5":
        return BANDS["md5"][0][0] if index >= 1 else BANDS["md5"][1][0]
    for color, (low, high) in BANDS[mode]:
        if low <= index < high:
            return color
    return BANDS[mode][-1][0]


def is_suspect(mode: str, index: float | None) -> bool:
    """Anything darker than the lightest band (for md5: any difference)."""
    if index is None:
        return False
    if mode == "md5":
        return index < 1
    return index >= BANDS[mode][0][1][1]


def _shapes(rows: list[Row]) -> list[tuple]:
    return [tuple(row.shape) if row.shape else () for row in rows]


def _compatible(npu: Node, bench: Node) -> bool:
    if len(npu.inputs) != len(bench.inputs) or len(npu.outputs) != len(bench.outputs):
        return False
    return _shapes(npu.inputs) == _shapes(bench.inputs) and _shapes(npu.outputs) == _shapes(bench.outputs)


def _fuzzy_key(node_id: str) -> str:
    parsed = parse_entry(node_id)  # an API call's count left out; a module's kept
    return parsed.without_count() if parsed is not None and not parsed.is_module else node_id


def without_class(node_id: str) -> str:
    """``Module.fc.Linear.forward.0`` -> ``Module.fc.forward.0``: across frameworks the classes differ."""
    parsed = parse_entry(node_id)
    return parsed.without_class() if parsed is not None and parsed.direction else node_id


def match_graphs(
    npu: Graph,
    bench: Graph,
    fuzzy: bool = False,
    translate: Callable[[str], str] | None = None,
    ignore_classes: bool = False,
) -> dict[str, str]:
    """NPU node id -> bench node id, walking both hierarchies from the root.

    ``ignore_classes`` (MindSpore against PyTorch) matches modules by path,
    direction and call count: a ``Dense`` cell pairs with the ``Linear`` module
    at the same place.
    """
    translate = translate or (lambda name: name)
    if ignore_classes:
        plain = translate

        def translate(name: str) -> str:
            return without_class(plain(name))

    key = without_class if ignore_classes else (lambda name: name)

    def api_key(name: str) -> str:
        return _fuzzy_key(name) if fuzzy else name

    matches = {npu.root: bench.root}
    for node in npu.preorder():
        partner_id = matches.get(node.id)
        if partner_id is None or not node.subnodes:
            continue
        partner = bench[partner_id]
        matches.update(_match_api_groups(npu, bench, node, partner, lambda name: api_key(translate(name)), api_key))
        if fuzzy:
            queues: dict[str, list[str]] = defaultdict(list)
            for child in partner.subnodes:
                queues[_fuzzy_key(child) if bench[child].node_type == API else key(child)].append(child)
            for child in node.subnodes:
                if npu[child].node_type == API_GROUP:
                    continue  # paired by their APIs above
                wanted = translate(child)
                queue = queues.get(_fuzzy_key(wanted) if npu[child].node_type == API else wanted)
                if queue and _compatible(npu[child], bench[queue[0]]):
                    matches[child] = queue.pop(0)
            continue
        children = {key(child): child for child in partner.subnodes}
        for child in node.subnodes:
            if npu[child].node_type == API_GROUP:
                continue
            wanted = children.get(translate(child))
            if wanted is not None and _compatible(npu[child], bench[wanted]):
                matches[child] = wanted
    return matches


def _match_api_groups(
    npu: Graph,
    bench: Graph,
    node: Node,
    partner: Node,
    npu_key: Callable[[str], str],
    bench_key: Callable[[str], str],
) -> dict[str, str]:
    """Pair ``Apis_Between_Modules.N`` groups by the APIs they hold, not by N.

    N counts groups in call order, so one API added or removed between two
    modules (a changed script, or the reference's ``Tensor.view_as``
    artefacts) renumbers every later group; pairing by number would leave all
    their APIs unmatched. A group pairs with the bench group holding most of
    its APIs, each bench group once; a group sharing no API with any pairs
    with the same-numbered one if that is still free.
    """
    groups = [group for group in node.subnodes if npu[group].node_type == API_GROUP]
    if not groups:  # only the root holds groups: every other node stops here
        return {}
    owner: dict[str, str] = {}
    for group in partner.subnodes:
        if bench[group].node_type == API_GROUP:
            for api in bench[group].subnodes:
                owner.setdefault(bench_key(api), group)
    pairs: dict[str, str] = {}
    taken: set[str] = set()
    for group in groups:
        votes = Counter(owner[key] for key in map(npu_key, npu[group].subnodes) if key in owner)
        for candidate, _count in votes.most_common():
            if candidate not in taken:
                pairs[group] = candidate
                taken.add(candidate)
                break
    bench_groups = {group for group in partner.subnodes if bench[group].node_type == API_GROUP}
    for group in groups:  # no API in common (every one changed): the group in the same place, if still free
        if group not in pairs and group in bench_groups and group not in taken:
            pairs[group] = group
            taken.add(group)
    return pairs


def _row_key(row: Row, node_id: str) -> str:
    return row.name[len(node_id) :]


def format_value(value: Any) -> str:
    """Numbers as the reference's .vis holds them: strings, six decimals or six significant digits."""
    if value is None or value == NA:
        return NA
    if isinstance(value, str):
        return value
    if isinstance(value, bool):
        return str(value)
    number = float(value)
    if math.isnan(number) or math.isinf(number):
        return str(number)
    if number != 0 and abs(number) < 1e-4:
        return f"{number:.6e}"
    return str(round(number, 6))


def _percent(value: Any) -> str:
    if isinstance(value, str) and value.endswith("%"):
        return f"{float(value[:-1]):.6f}%"
    return format_value(value)


@dataclass
class GraphComparison:
    mode: str
    matches: dict[str, str]
    metrics: dict[str, dict[str, str]]  # NPU row name -> metric column -> formatted value
    partners: dict[str, Row] = field(default_factory=dict)  # NPU row name -> the bench row it was compared with

    @property
    def task(self) -> str:
        return VIS_TASK[self.mode]


def compare_graphs(
    npu: Graph,
    bench: Graph,
    fuzzy: bool = False,
    translate: Callable[[str], str] | None = None,
    load: TensorLoader | None = None,
    ignore_classes: bool = False,
) -> GraphComparison:
    """Match the graphs, compare every matched value and score every matched node (in place)."""
    matches = match_graphs(npu, bench, fuzzy, translate, ignore_classes)
    pairs: list[tuple[Row | None, Row | None]] = []
    npu_rows: list[Row] = []
    bench_rows: list[Row] = []
    for npu_id, bench_id in matches.items():
        npu_node, bench_node = npu[npu_id], bench[bench_id]
        npu_rows += npu_node.inputs + npu_node.outputs
        bench_rows += bench_node.inputs + bench_node.outputs
        by_key = {_row_key(r, bench_id): r for r in bench_node.inputs + bench_node.outputs}
        for row in npu_node.inputs + npu_node.outputs:
            pairs.append((row, by_key.get(_row_key(row, npu_id))))
    mode = detect_mode(npu_rows, bench_rows, npu.dump, bench.dump)
    if mode == "tensor" and load is None:
        mode = "statistics"
    if mode == "tensor":
        table = tensor_table(pairs, npu.dump, bench.dump, load)
        columns = TENSOR_METRICS
    elif mode == "md5":
        table = md5_table(pairs)
        columns = ("Result",)
    else:
        table = statistics_table(pairs)
        columns = STATISTICS_METRICS
    metrics: dict[str, dict[str, str]] = {}
    records = table[list(columns)].to_dict("records") if len(table) else []
    for (npu_row, bench_row), record in zip(pairs, records):
        if npu_row is None or bench_row is None:
            continue
        metrics[npu_row.name] = {
            key: (_percent(value) if key.endswith("RelativeErr") and mode == "statistics" else format_value(value))
            for key, value in record.items()
        }
    partners = {n.name: b for n, b in pairs if n is not None and b is not None}
    comparison = GraphComparison(mode, matches, metrics, partners)
    _score(npu, bench, comparison)
    return comparison


def _float(value: str | None) -> float | None:
    if value is None or value == NA:
        return None
    try:
        number = float(value[:-1]) / 100 if value.endswith("%") else float(value)
    except ValueError:
        return None
    return number if math.isfinite(number) else None


def _scaled_error(row: Row, bench: Row) -> float | None:
    """Largest relative error of the four statistics (msprobe.core.distance: each against at least the bench
    tensor's root mean square, so a mean near zero does not read noise as a large error)."""
    return statistics_distance(row.stats, bench.stats, math.prod(bench.shape) if bench.shape else 1)


def node_index(
    mode: str, node: Node, metrics: dict[str, dict[str, str]], partners: dict[str, Row] | None = None
) -> float:
    """The precision_index of one matched node that carries data (statistics: see :func:`_scaled_error`)."""
    if mode == "md5":
        results = [metrics.get(row.name, {}).get("Result") for row in node.inputs + node.outputs]
        return 0 if any(result == "Different" for result in results) else 1
    if mode == "tensor":

        def lowest(rows: list[Row]) -> float | None:
            values = [_float(metrics.get(row.name, {}).get("One Thousandth Err Ratio")) for row in rows]
            values = [v for v in values if v is not None]
            return min(values) if values else None

        before, after = lowest(node.inputs), lowest(node.outputs)
        if before is None or after is None:
            return 0
        return float(np.clip(before - after, 0, 1))
    errors = []
    for row in node.outputs:
        bench = (partners or {}).get(row.name)
        if bench is not None:
            error = _scaled_error(row, bench)
            if error is not None:
                errors.append(error)
            continue
        for key in ("MaxRelativeErr", "MinRelativeErr", "MeanRelativeErr", "NormRelativeErr"):
            value = _float(metrics.get(row.name, {}).get(key))
            if value is not None:
                errors.append(abs(value))
    return float(min(max(errors), 1)) if errors else 0


def _score(npu: Graph, bench: Graph, comparison: GraphComparison) -> None:
    reverse = {bench_id: npu_id for npu_id, bench_id in comparison.matches.items()}
    for node in npu.nodes.values():
        node.matched = comparison.matches.get(node.id)
        node.matched_link = bench.ancestors(node.matched) if node.matched else []  # the partner's path
        if node.matched and node.has_data:
            node.data["precision_index"] = node_index(comparison.mode, node, comparison.metrics, comparison.partners)
            if comparison.mode == "md5":
                node.data["Result"] = "Pass" if node.data["precision_index"] == 1 else "Different"
    for node in npu.preorder()[::-1]:  # groups take their worst child
        if node.node_type == API_GROUP and node.matched:
            scores = [npu[c].data["precision_index"] for c in node.subnodes if "precision_index" in npu[c].data]
            if scores:
                worst = min(scores) if comparison.mode == "md5" else max(scores)
                node.data["precision_index"] = worst
    for node in bench.nodes.values():
        node.matched = reverse.get(node.id)
        node.matched_link = npu.ancestors(node.matched) if node.matched else []
