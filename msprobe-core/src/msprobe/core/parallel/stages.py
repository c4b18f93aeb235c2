"""Pipeline stages merged into the one global run: each rank runs its own modules, so its calls are the global
run's calls of those modules, numbered on from the stages before it.

A run is taken for a pipeline when no rank declares another layout (data or tensor parallelism) and each rank
holds modules that no other rank holds, the modules held by every rank (a wrapper) aside. The stages are the
ranks in their order, the first holding the model's first modules. A stage's calls keep their order; the
forward runs the stages first to last, the backward last to first, and then the optimizer each stage's own
parameters, as in the global run. An API's count
(``Functional.linear.3``) goes on from the calls of that API in the stages before; a module's name stays as it
is. The point-to-point calls that hand activations and gradients between stages are the layout's own
communication, which the global run does not make, and are left out.

Limits: one microbatch per step (a schedule of several runs each stage's modules once per microbatch), and a
pipeline that is not also data or tensor parallel.
"""

from __future__ import annotations

import copy
from collections.abc import Iterator
from dataclasses import replace
from typing import TYPE_CHECKING, Any

from msprobe.core.dump.entry_names import BACKWARD, parse_entry
from msprobe.core.dump.reader import Dump

if TYPE_CHECKING:
    from msprobe.core.parallel.merge import TensorFiles

# the calls that hand a stage's activations on and its gradients back
POINT_TO_POINT = frozenset(
    {"send", "recv", "isend", "irecv", "batch_isend_irecv", "send_object_list", "recv_object_list"}
)


def _modules(dump: Dump) -> set[str]:
    paths = set()
    for name in dump.data:
        parsed = parse_entry(name)
        if parsed is not None and parsed.path is not None:
            paths.add(parsed.path)
    return paths


def pipeline_stages(dumps: dict[int, Dump]) -> dict[int, list[str]] | None:
    """Each rank's own modules, in rank order, when the ranks are pipeline stages; else None."""
    if len(dumps) < 2:
        return None
    for dump in dumps.values():
        layout = dump.parallel or {}
        if layout.get("data_parallel") or layout.get("tensor_parallel"):
            return None
    held = {rank: _modules(dump) for rank, dump in sorted(dumps.items())}
    shared = set.intersection(*held.values())
    own = {rank: paths - shared for rank, paths in held.items()}
    if any(not paths for paths in own.values()):
        return None
    seen: set[str] = set()
    for paths in own.values():
        if paths & seen:
            return None
        seen |= paths
    return {rank: sorted(paths) for rank, paths in own.items()}


def _is_point_to_point(name: str) -> bool:
    parsed = parse_entry(name)
    return parsed is not None and parsed.prefix == "Distributed" and parsed.kind.split(".", 1)[1] in POINT_TO_POINT


def _renames(dumps: dict[int, Dump]) -> dict[int, dict[str, str]]:
    """Each stage's entry names as the global run gives them: an API's count goes on from the stages before."""
    before: dict[str, int] = {}  # API kind -> its forward calls in the stages so far
    renames: dict[int, dict[str, str]] = {}
    for rank, dump in sorted(dumps.items()):
        here: dict[str, int] = {}
        names: dict[str, str] = {}
        for name in dump.data:
            if _is_point_to_point(name):
                continue
            parsed = parse_entry(name)
            if parsed is None or parsed.is_module or parsed.count is None:
                names[name] = name
                continue
            names[name] = replace(parsed, count=parsed.count + before.get(parsed.kind, 0)).format()
            here[parsed.kind] = max(here.get(parsed.kind, 0), parsed.count + 1)
        for kind, count in here.items():
            before[kind] = before.get(kind, 0) + count
        renames[rank] = names
    return renames


def _tensor_leaves(value: Any) -> Iterator[dict]:
    if isinstance(value, dict):
        if "shape" in value and "dtype" in value:
            yield value
            return
        for item in value.values():
            yield from _tensor_leaves(item)
    elif isinstance(value, list):
        for item in value:
            yield from _tensor_leaves(item)


def merge_stages(
    dumps: dict[int, Dump], stages: dict[int, list[str]], arrays: TensorFiles | None = None
) -> tuple[Dump, dict[str, int]]:
    """The stages' dumps as the one global run's (entries renamed and in the global run's order, their tensor
    files, in a tensor dump, written under the new names), and the rank each merged entry comes from."""
    renames = _renames(dumps)
    ranks = sorted(dumps)
    forward: list[tuple[int, str]] = []
    backward: list[tuple[int, str]] = []
    optimizer: list[tuple[int, str]] = []  # each stage's optimizer updates its own parameters, after the backward
    for rank in ranks:
        construct = dumps[rank].construct or {}
        for name in renames[rank]:
            parsed = parse_entry(name)
            if construct.get(name) == "optimizer":
                optimizer.append((rank, name))
            else:
                (backward if parsed is not None and parsed.phase == BACKWARD else forward).append((rank, name))
    # the backward runs the stages last to first
    backward.sort(key=lambda item: -ranks.index(item[0]))
    data: dict[str, Any] = {}
    holders: dict[str, int] = {}
    for rank, name in [*forward, *backward, *optimizer]:
        new = renames[rank][name]
        if new in data:  # a module on every stage (a wrapper): the first stage's entry stands for it
            continue
        entry = dumps[rank].data[name]
        if arrays is not None:
            entry = _with_tensor_files(entry, rank, name, new, arrays)
        data[new] = entry
        holders[new] = rank
    construct: dict[str, Any] = {}
    stack: dict[str, Any] = {}
    for rank in ranks:
        names = renames[rank]
        for name, parent in (dumps[rank].construct or {}).items():
            if name in names:
                construct.setdefault(names[name], names.get(parent, parent) if isinstance(parent, str) else parent)
        for name, frames in (dumps[rank].stack or {}).items():
            if name in names:
                stack.setdefault(names[name], frames)
    first = dumps[ranks[0]]
    parallel = {
        "merged_ranks": ranks,
        "world_size": len(ranks),
        "pipeline_stages": {str(rank): modules for rank, modules in stages.items()},
    }
    merged = Dump(
        first.path, first.task, first.level, first.framework, data, None,
        stack=stack, construct=construct, parallel=parallel,
    )  # fmt: skip
    return merged, holders


def _with_tensor_files(entry: Any, rank: int, old: str, new: str, arrays: TensorFiles) -> Any:
    """A copy of ``entry`` whose tensor files are the stage's, written again under the renamed entry's name."""
    entry = copy.deepcopy(entry)
    for leaf in _tensor_leaves(entry):
        file_name = leaf.get("data_name")
        if not isinstance(file_name, str):
            continue
        array = arrays.load(rank, leaf)
        if array is None:
            continue
        renamed = new + file_name[len(old) :] if file_name.startswith(old) else f"{new}.{file_name}"
        leaf["data_name"] = arrays.save(renamed, array)
    return entry
