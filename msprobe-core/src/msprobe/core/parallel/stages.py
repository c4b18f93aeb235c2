"""Pipeline stages merged into the one global run: each rank runs its own modules, so its calls are the global
run's calls of those modules, numbered on from the stages before it.

A run is taken for a pipeline when no rank declares another layout (data or tensor parallelism) and each rank
holds modules that no other rank holds, the modules held by every rank (a wrapper) aside. The stages are the
ranks in their order, the first holding the model's first modules. A step of several microbatches is merged
microbatch by microbatch, as a run of one process accumulating the same microbatches makes its calls: the
forward runs the stages first to last, the backward last to first, and after the last microbatch the optimizer
updates each stage's own parameters. An API's count (``Functional.linear.3``) goes on from the calls of that
API in the microbatches and the stages before; a module's name stays as it is. The point-to-point calls that
hand activations and gradients between stages are the layout's own communication, which the global run does
not make, and are left out.

A pipeline whose stages are data parallel is taken as one pipeline per replica (``pipeline_replicas``), which
the data-parallel merge then joins. A pipeline whose stages are tensor parallel (a declared layout of plain
tensors, as Megatron's) is taken the other way round: each stage's tensor-parallel group merges first into
the stage, and the stages then merge as here (``tensor_parallel_groups``).

Limits: a golden run of the same microbatches; a pipeline whose stages are both data and tensor parallel.
"""

from __future__ import annotations

import copy
from dataclasses import replace
from typing import TYPE_CHECKING, Any

from msprobe.core.dump.entry_names import BACKWARD, parse_entry
from msprobe.core.dump.reader import Dump
from msprobe.core.errors import DataFileError
from msprobe.core.trees import is_tensor_summary, leaves

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


def pipeline_stages(dumps: dict[int, Dump], replicas: bool = False) -> dict[int, list[str]] | None:
    """Each rank's own modules, in rank order, when the ranks are pipeline stages; else None. ``replicas``:
    the ranks are one replica of a pipeline whose stages are data parallel (they record that parallelism)."""
    if len(dumps) < 2:
        return None
    for dump in dumps.values():
        layout = dump.parallel or {}
        if (layout.get("data_parallel") and not replicas) or layout.get("tensor_parallel"):
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


def pipeline_replicas(dumps: dict[int, Dump]) -> list[dict[int, Dump]] | None:
    """A pipeline whose stages are data parallel, as one pipeline per replica: the data-parallel groups are
    the stages (each holding its own modules), and replica ``d`` is every group's ``d``-th rank. None for any
    other layout."""
    groups: set[tuple[int, ...]] = set()
    for rank, dump in dumps.items():
        layout = dump.parallel or {}
        group = layout.get("data_parallel")
        ranks = group.get("ranks") if isinstance(group, dict) else None
        if layout.get("tensor_parallel") or not isinstance(ranks, list) or rank not in ranks:
            return None
        groups.add(tuple(sorted(ranks)))
    ordered = sorted(groups)
    sizes = {len(group) for group in ordered}
    members = [rank for group in ordered for rank in group]
    if len(ordered) < 2 or len(sizes) != 1 or sorted(members) != sorted(dumps) or len(set(members)) != len(members):
        return None
    replicas = [{group[index]: dumps[group[index]] for group in ordered} for index in range(sizes.pop())]
    stages = [pipeline_stages(replica, replicas=True) for replica in replicas]
    if any(found is None or list(found.values()) != list(stages[0].values()) for found in stages):
        return None
    return replicas


def tensor_parallel_groups(dumps: dict[int, Dump]) -> list[dict[int, Dump]] | None:
    """A pipeline whose stages are tensor parallel (Megatron's PP with TP), as its tensor-parallel groups in
    stage order: every rank declares the group it is in (config.json's ``tensor_parallel.ranks``), and the
    groups are several, of one size, and hold every rank once. None for any other layout."""
    groups: set[tuple[int, ...]] = set()
    for rank, dump in dumps.items():
        layout = dump.parallel or {}
        declared = layout.get("tensor_parallel")
        ranks = declared.get("ranks") if isinstance(declared, dict) else None
        if layout.get("data_parallel") or not isinstance(ranks, list) or rank not in ranks:
            return None
        groups.add(tuple(ranks))
    ordered = sorted(groups, key=min)
    members = [rank for group in ordered for rank in group]
    if len(ordered) < 2 or len({len(group) for group in ordered}) != 1 or sorted(members) != sorted(dumps):
        return None
    if len(set(members)) != len(members):
        return None
    return [{rank: dumps[rank] for rank in group} for group in ordered]


def _is_point_to_point(name: str) -> bool:
    parsed = parse_entry(name)
    return parsed is not None and parsed.prefix == "Distributed" and parsed.kind.split(".", 1)[1] in POINT_TO_POINT


def _microbatches(rank: int, dump: Dump, own: list[str]) -> tuple[int, dict[str, int], dict[str, int]]:
    """How many microbatches the stage ran, and each entry's microbatch. A stage's own module called least
    often is called once per microbatch; each microbatch makes the same calls, so an API's ``k``-th call of
    ``n`` over ``m`` microbatches is the microbatch ``k // (n / m)``'s. A module's parameter gradients, which
    the microbatches accumulate, go with the last; another entry without a count goes with the entry before
    it. Also each API's and module's calls (the highest count
    and one)."""
    totals: dict[str, int] = {}
    modules: dict[str, str] = {}  # kind -> its module's path
    for name in dump.data:
        parsed = parse_entry(name)
        if parsed is None or parsed.count is None or _is_point_to_point(name):
            continue
        totals[parsed.kind] = max(totals.get(parsed.kind, 0), parsed.count + 1)
        if parsed.is_module:
            modules[parsed.kind] = parsed.path or ""
    owned = [totals[kind] for kind, path in modules.items() if path in own]
    count = min(owned) if owned else 1
    for kind, total in totals.items():
        if total % count:
            raise DataFileError(
                dump.path,
                f"pipeline stage on rank {rank}: {total} calls of {kind} do not split over its {count} microbatches "
                "(each microbatch must make the same calls)",
            )
    microbatch: dict[str, int] = {}
    current = 0
    for name in dump.data:
        parsed = parse_entry(name)
        if parsed is not None and parsed.is_parameters_grad:
            microbatch[name] = count - 1  # the gradient the microbatches accumulate: whole after the last
            continue
        if parsed is not None and parsed.count is not None and parsed.kind in totals:
            current = parsed.count // (totals[parsed.kind] // count)
        microbatch[name] = current
    return count, microbatch, totals


def _global_order(
    dumps: dict[int, Dump], stages: dict[int, list[str]]
) -> tuple[list[tuple[int, str]], dict[tuple[int, str], str]]:
    """Each stage's entries in the global run's order, and the names the global run gives them.

    The order: microbatch by microbatch, the forward of every stage first to last, then its backward last to
    first; each stage's optimizer after all of them. The names: an API's count goes on from the calls of that
    API in the microbatches before and, within a microbatch, in the stages before (a backward keeps its
    forward's count); a module's name stays as it is (its count is its microbatch)."""
    ranks = sorted(dumps)
    forward: dict[tuple[int, int], list[str]] = {}
    backward: dict[tuple[int, int], list[str]] = {}
    optimizer: list[tuple[int, str]] = []  # each stage's optimizer updates its own parameters, after the backward
    counts: dict[int, int] = {}
    totals: dict[int, dict[str, int]] = {}
    for rank in ranks:
        dump = dumps[rank]
        counts[rank], microbatch, totals[rank] = _microbatches(rank, dump, stages.get(rank, []))
        construct = dump.construct or {}
        for name in dump.data:
            if _is_point_to_point(name):
                continue
            parsed = parse_entry(name)
            if construct.get(name) == "optimizer":
                optimizer.append((rank, name))
                continue
            side = backward if parsed is not None and parsed.phase == BACKWARD else forward
            side.setdefault((microbatch[name], rank), []).append(name)
    if len(set(counts.values())) > 1:
        said = ", ".join(f"rank {rank}: {count}" for rank, count in counts.items())
        raise DataFileError(dumps[ranks[0]].path.parent, f"pipeline stages ran other numbers of microbatches ({said})")
    microbatches = next(iter(counts.values()), 1)
    order: list[tuple[int, str]] = []
    for index in range(microbatches):
        for rank in ranks:
            order += [(rank, name) for name in forward.get((index, rank), [])]
        for rank in reversed(ranks):
            order += [(rank, name) for name in backward.get((index, rank), [])]
    order += optimizer
    # an API's calls per microbatch on each stage, and on the stages before it
    per = {rank: {kind: total // microbatches for kind, total in totals[rank].items()} for rank in ranks}
    renames: dict[tuple[int, str], str] = {}
    for rank, name in order:
        parsed = parse_entry(name)
        if parsed is None or parsed.is_module or parsed.count is None:
            renames[(rank, name)] = name
            continue
        kind, size = parsed.kind, per[rank][parsed.kind]
        within = sum(per[other].get(kind, 0) for other in ranks)
        before = sum(per[other].get(kind, 0) for other in ranks if other < rank)
        index, offset = divmod(parsed.count, size)
        renames[(rank, name)] = replace(parsed, count=index * within + before + offset).format()
    return order, renames


def merge_stages(
    dumps: dict[int, Dump], stages: dict[int, list[str]], arrays: TensorFiles | None = None
) -> tuple[Dump, dict[str, int]]:
    """The stages' dumps as the one global run's (entries renamed and in the global run's order, their tensor
    files, in a tensor dump, written under the new names), and the rank each merged entry comes from."""
    order, renames = _global_order(dumps, stages)
    ranks = sorted(dumps)
    data: dict[str, Any] = {}
    holders: dict[str, int] = {}
    for rank, name in order:
        new = renames[(rank, name)]
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
        for name, parent in (dumps[rank].construct or {}).items():
            if (rank, name) in renames:
                renamed = renames.get((rank, parent), parent) if isinstance(parent, str) else parent
                construct.setdefault(renames[(rank, name)], renamed)
        for name, frames in (dumps[rank].stack or {}).items():
            if (rank, name) in renames:
                stack.setdefault(renames[(rank, name)], frames)
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
    for leaf in leaves(entry, is_tensor_summary):
        file_name = leaf.get("data_name")
        if not isinstance(file_name, str):
            continue
        array = arrays.load(rank, leaf)
        if array is None:
            continue
        renamed = new + file_name[len(old) :] if file_name.startswith(old) else f"{new}.{file_name}"
        leaf["data_name"] = arrays.save(renamed, array)
    return entry
