"""Lining up two op logs (dumps at level ``aten``) whose op streams differ.

Two runs of one model seldom execute the same ATen ops: a compiler
decomposes one op into several, fuses others, another implementation of a
layer adds a few. Call counts then drift, and ``Aten.mul.7`` of one run is
not ``Aten.mul.7`` of the other. The calls are matched in passes, each
over what the passes before left (the first three kept in the order both
logs ran):

1. exact: the same entry name, the same shapes, and inputs of the same
   float64 norm hash (a call nothing upstream changed);
2. values: the op, its shapes and its outputs' norm hash, where exactly one
   call of each log has them (a call whose name the extra calls shifted);
3. fuzzy: between two calls matched so far, the ops and shapes of each log
   are aligned in order (longest matching runs first, as ``difflib`` does):
   calls whose values changed;
4. signature: the op, its shapes and its outputs' norm hash, wherever the
   call sits (a call moved by a reordering).

A call left over exists in one run only. The match is a name mapping for
the compare: each matched NPU call is compared with its bench partner.
"""

from __future__ import annotations

import bisect
import difflib
import itertools
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from msprobe.core.dump.entry_names import parse_entry

OP_LOG_LEVEL = "aten"
UNMATCHED = "[unmatched] "


@dataclass(frozen=True)
class OpCall:
    name: str
    op: str
    shapes: tuple
    input_norms: tuple
    output_norms: tuple


def _rounded(value: Any) -> Any:
    """A norm hash to 6 significant digits: float32 work summed in another order moves it less than that."""
    return float(f"{value:.6g}") if isinstance(value, (int, float)) else value


def _tensors(value: Any, found: list[dict]) -> list[dict]:
    if isinstance(value, dict) and "shape" in value and "dtype" in value:
        found.append(value)
    elif isinstance(value, dict):
        for item in value.values():
            _tensors(item, found)
    elif isinstance(value, list):
        for item in value:
            _tensors(item, found)
    return found


def op_calls(data: dict[str, Any]) -> list[OpCall]:
    """The calls of an op log's entries, in the order they ran."""
    calls = []
    for name, entry in data.items():
        parsed = parse_entry(name)
        if parsed is None or parsed.prefix != "Aten" or parsed.direction != "forward" or not isinstance(entry, dict):
            continue
        inputs = _tensors([entry.get("input_args"), entry.get("input_kwargs")], [])
        outputs = _tensors(entry.get("output"), [])
        shapes = tuple(tuple(t.get("shape") or ()) for t in inputs + outputs)
        calls.append(
            OpCall(
                name,
                parsed.kind.removeprefix("Aten."),
                shapes,
                tuple(_rounded(t.get("norm_hash")) for t in inputs),
                tuple(_rounded(t.get("norm_hash")) for t in outputs),
            )
        )
    return calls


def match_op_calls(npu: Sequence[OpCall], bench: Sequence[OpCall]) -> dict[int, tuple[int, str]]:
    """NPU call index -> (bench call index, the pass that matched them: exact, values, fuzzy or signature)."""
    matched: dict[int, tuple[int, str]] = {}
    bench_index = {call.name: index for index, call in enumerate(bench)}
    for index, call in enumerate(npu):
        other = bench_index.get(call.name)
        if other is not None and _same_exactly(call, bench[other]):
            matched[index] = (other, "exact")
    _in_order(matched)  # a name matched out of order is left to the other passes
    # calls whose values agree, wherever their names put them, anchor the alignment too (kept in order)
    _by_signature(npu, bench, matched, unique=True, label="values")
    _in_order(matched)
    anchors = sorted((i, j) for i, (j, _) in matched.items())
    bounds = [(-1, -1), *anchors, (len(npu), len(bench))]
    for (low_npu, low_bench), (high_npu, high_bench) in itertools.pairwise(bounds):
        ours = list(range(low_npu + 1, high_npu))
        theirs = list(range(low_bench + 1, high_bench))
        aligner = difflib.SequenceMatcher(
            None, [(npu[i].op, npu[i].shapes) for i in ours], [(bench[j].op, bench[j].shapes) for j in theirs], False
        )
        for block in aligner.get_matching_blocks():
            for step in range(block.size):
                matched[ours[block.a + step]] = (theirs[block.b + step], "fuzzy")
    _by_signature(npu, bench, matched, unique=False, label="signature")  # what a reordering moved
    return matched


def _in_order(matched: dict[int, tuple[int, str]]) -> None:
    """Keep the matches that run forward in both logs (the longest such chain), drop the rest."""
    items = sorted(matched.items())
    best: list[int] = []  # the longest increasing chain of bench indices, by patience sorting
    ends: list[int] = []
    parents: list[int] = [-1] * len(items)
    for position, (_, (j, _)) in enumerate(items):
        place = bisect.bisect_left(ends, j)
        if place == len(ends):
            ends.append(j)
            best.append(position)
        else:
            ends[place], best[place] = j, position
        parents[position] = best[place - 1] if place else -1
    keep, position = set(), best[-1] if best else -1
    while position >= 0:
        keep.add(items[position][0])
        position = parents[position]
    for i, _ in items:
        if i not in keep:
            del matched[i]


def _by_signature(
    npu: Sequence[OpCall], bench: Sequence[OpCall], matched: dict[int, tuple[int, str]], unique: bool, label: str
) -> None:
    """Pair calls left over by their op, shapes and outputs' norm hash (``unique``: only a signature that one
    call on each side has)."""
    used = {j for j, _ in matched.values()}
    waiting: dict[tuple, list[int]] = {}
    for j, call in enumerate(bench):
        if j not in used:
            waiting.setdefault((call.op, call.shapes, call.output_norms), []).append(j)
    mine: dict[tuple, list[int]] = {}
    for i, call in enumerate(npu):
        if i not in matched:
            mine.setdefault((call.op, call.shapes, call.output_norms), []).append(i)
    for signature, ours in mine.items():
        theirs = waiting.get(signature, [])
        if unique and (len(ours) != 1 or len(theirs) != 1):
            continue
        for i, j in zip(ours, theirs):
            matched[i] = (j, label)


def _same_exactly(ours: OpCall, theirs: OpCall) -> bool:
    return ours.shapes == theirs.shapes and ours.input_norms == theirs.input_norms


def op_log_mapping(npu_data: dict[str, Any], bench_data: dict[str, Any]) -> Callable[[str], str]:
    """A compare name mapping from the match: a matched NPU row is renamed to its bench partner's row, an
    unmatched one to a name no bench row has."""
    npu, bench = op_calls(npu_data), op_calls(bench_data)
    renamed = {npu[i].name: bench[j].name for i, (j, _) in match_op_calls(npu, bench).items()}
    logged = {call.name for call in npu}

    def translate(row_name: str) -> str:
        entry, dot, rest = row_name.partition(".forward")
        entry += dot
        if entry in renamed:
            return renamed[entry] + rest
        return UNMATCHED + row_name if entry in logged else row_name

    return translate
