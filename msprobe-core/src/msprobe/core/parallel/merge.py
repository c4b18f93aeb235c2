"""The ranks of one step merged into the global run they compute together.

Each value of an entry is merged across the ranks that hold the entry:

- a DTensor's shards by their placements, mesh dimension by mesh dimension: ``Shard(d)`` side by side along
  ``d``, ``Replicate`` checked alike and taken once, ``Partial`` added up;
- in data parallelism (DDP, FSDP2: dump.json's ``parallel.data_parallel``), a plain tensor alike on every rank
  is taken once (a parameter must be: one that is not is a desynced replica); one that differs is each rank's
  share of the batch, side by side along the batch dimension, or, when it has the global run's shape, a
  per-rank reduction, averaged as data parallelism defines it (a mean loss). A gradient of the backward is
  scaled by 1 / ranks, since each rank's loss is the mean over its own share only;
- elsewhere (tensor parallelism with plain tensors), a tensor that differs is tiled along the one dimension
  where the pieces add up to the global run's shape, or added up where they have its shape (partial sums).

The global run's shapes, when another run of them is at hand (``expected``), decide where a data-parallel piece
or a plain tensor-parallel one goes; without them a data-parallel piece goes along dimension 0.

What cannot be merged (shards that do not tile their global shape, a mesh missing a rank, values that are not
alike in kind) is a ``DataFileError`` naming the entry and the rank. What should be alike on every rank and is
not is a ``Finding``, and the merged value is then the lowest rank's.
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from fnmatch import fnmatch
from pathlib import Path
from typing import Any, Protocol

import numpy as np

from msprobe.core.dump.entry_names import direction, module_path
from msprobe.core.dump.reader import Dump
from msprobe.core.errors import DataFileError
from msprobe.core.parallel import stats
from msprobe.core.parallel.names import canonical
from msprobe.core.parallel.own_calls import own_patterns, without_own_calls
from msprobe.core.parallel.stages import merge_stages, pipeline_replicas, pipeline_stages, tensor_parallel_groups
from msprobe.core.parallel.stats import ARRAY
from msprobe.core.trees import is_tensor_summary

# the global run's value (a tensor summary, a number...) at (entry name, path of the value in the entry), or None
ExpectedShape = Callable[[str, tuple], Any]

PHASES = ("forward", "backward", "optimizer")
_PLACEMENT = re.compile(r"^(?:S\((?P<dim>-?\d+)\)|(?P<replicate>R)|P(?:\((?P<op>\w+)\))?)$")


class TensorFiles(Protocol):
    """Where a tensor dump's pieces are read from, and the merged tensors written to."""

    def load(self, rank: int, piece: dict) -> np.ndarray | None: ...

    def save(self, file_name: str, array: np.ndarray) -> str: ...


@dataclass
class Finding:
    """A value that should be alike on every rank and is not."""

    entry: str
    where: str
    ranks: list[int]
    words: str
    module: str | None = None  # the module the entry belongs to (its own, or the one that made the call)
    phase: str = "forward"  # "forward", "backward" or "optimizer": findings are read in the order calls ran
    order: int = 0  # the entry's place in the merged step

    def said(self) -> str:
        """ "rank 1 holds ...", "ranks 0, 1 hold ..."."""
        several = len(self.ranks) > 1
        words = self.words.replace("{hold}", "hold" if several else "holds")
        return f"rank{'s' if several else ''} {', '.join(map(str, self.ranks))} {words}"

    def line(self) -> str:
        return f"{self.entry} {self.where}: {self.said()}"


@dataclass
class MergedStep:
    """One step of a run of several processes, as the one global run it computes."""

    dump: Dump
    ranks: list[int]
    findings: list[Finding] = field(default_factory=list)
    data_parallel: int = 1
    # pipeline stages: the rank each entry comes from (the ranks, where each stage is tensor parallel)
    stage_of: dict[str, int | list[int]] = field(default_factory=dict)


is_tensor = is_tensor_summary


def _where(path: tuple) -> str:
    return " ".join(str(part) for part in path) or "value"


class _Merger:
    def __init__(self, dumps: dict[int, Dump], expected: ExpectedShape | None, arrays: TensorFiles | None = None):
        self.dumps = dumps
        self.expected = expected
        self.findings: list[Finding] = []
        self.constructs: list[dict[str, Any]] = []
        self.arrays = arrays
        layouts = [dump.parallel or {} for dump in dumps.values()]
        group = next((layout.get("data_parallel") for layout in layouts if layout.get("data_parallel")), None)
        self.dp_ranks = sorted(group["ranks"]) if group else []
        self.dp_kind = group.get("kind") if group else None
        self.data_parallel = len(self.dp_ranks) if self.dp_ranks else 1
        self.declared = _declared_layout(dumps)
        self._layout_collectives: set[str] = set()  # a declared module's collectives (its all-reduce)
        self._after_collective: set[str] = set()  # calls a declared module makes after its collective
        self._rules: dict[str, dict | None] = {}  # module path -> its declared rule (the first pattern it matches)

    def module_of(self, name: str) -> str | None:
        """The module an entry is a call of: its own path for a module's entry, else its parent's in
        construct.json (of any rank; entry names as the one-process run gives them)."""
        own = module_path(name)
        if own is not None:
            return own
        for construct in self.constructs:
            parent = construct.get(name)
            if isinstance(parent, str):
                return module_path(parent)
        return None

    def phase_of(self, name: str) -> str:
        if ".backward" in name or name.endswith("parameters_grad"):
            return "backward"
        if any(construct.get(name) == "optimizer" for construct in self.constructs):
            return "optimizer"
        return "forward"

    # -- a whole step ---------------------------------------------------------------------------
    def merge(self) -> MergedStep:
        ranks = sorted(self.dumps)
        ddp = self.dp_kind == "ddp"
        renamed = {rank: _renamed(dump.data, ddp) for rank, dump in self.dumps.items()}
        self.constructs = [_renamed_construct(dump.construct, ddp) for dump in self.dumps.values()]
        order: dict[str, None] = {}
        for rank in ranks:
            order.update(dict.fromkeys(renamed[rank]))
        if self.declared is not None:
            self._read_declared_calls(list(order))
        data = {}
        for name in order:
            if name in self._layout_collectives:  # the declared layout's own communication: the golden run has none
                continue
            holders = [rank for rank in ranks if name in renamed[rank]]
            if len(holders) < len(ranks):
                missing = sorted(set(ranks) - set(holders))
                words = "made no such call (the others did)"
                self.findings.append(Finding(name, "entry", missing, words, module=self.module_of(name)))
            entries = [renamed[rank][name] for rank in holders]
            data[name] = self.value(name, (), entries, holders)
        places = {name: index for index, name in enumerate(order)}
        for finding in self.findings:
            finding.order = places.get(finding.entry, len(places))
            finding.phase = self.phase_of(finding.entry)
        self.findings.sort(key=lambda finding: (PHASES.index(finding.phase), finding.order))
        first = self.dumps[ranks[0]]
        merged = Dump(
            first.path,
            first.task,
            first.level,
            first.framework,
            data,
            None,
            stack=_renamed(first.stack, ddp),
            construct=_renamed_construct(first.construct, ddp),
            parallel={"merged_ranks": ranks, "world_size": len(ranks)},
        )
        return MergedStep(merged, ranks, self.findings, self.data_parallel)

    # -- one value --------------------------------------------------------------------------------
    def value(self, name: str, path: tuple, values: list[Any], ranks: list[int]) -> Any:
        first = values[0]
        if is_tensor(first):
            if not all(is_tensor(value) for value in values):
                raise self._unmergeable(name, path, values, ranks, "is a tensor on some ranks only")
            return self.tensor(name, path, values, ranks)
        if isinstance(first, list):
            if any(not isinstance(value, list) or len(value) != len(first) for value in values):
                raise self._unmergeable(name, path, values, ranks, "holds lists of different lengths")
            return [self.value(name, (*path, index), [v[index] for v in values], ranks) for index in range(len(first))]
        if isinstance(first, dict) and not ("type" in first and "value" in first):
            if any(not isinstance(value, dict) or value.keys() != first.keys() for value in values):
                raise self._unmergeable(name, path, values, ranks, "holds other fields")
            return {key: self.value(name, (*path, key), [v[key] for v in values], ranks) for key in first}
        return self.plain_value(name, path, values, ranks)

    def plain_value(self, name: str, path: tuple, values: list[Any], ranks: list[int]) -> Any:
        """A number, a string, None: alike on every rank, or a batch size that scales with data parallelism."""
        first = values[0]
        if all(value == first for value in values):
            scaled = self._batch_size(name, path, first)
            return scaled if scaled is not None else first
        odd = [rank for rank, value in zip(ranks, values) if value != first]
        words = f"{{hold}} {_text(values[1:])} where rank {ranks[0]} holds {_text([first])}"
        self.findings.append(Finding(name, _where(path), odd, words, module=self.module_of(name)))
        return first

    def _batch_size(self, name: str, path: tuple, value: Any) -> Any:
        """A data-parallel rank's integer argument that is the global run's divided by the ranks (a reshape to
        the local batch): the global run's."""
        if self.data_parallel < 2 or self.expected is None or not isinstance(value, dict):
            return None
        number = value.get("value")
        if type(number) is not int or number <= 0:
            return None
        expected = self.expected(name, path)
        if isinstance(expected, dict) and expected.get("value") == number * self.data_parallel:
            return {**value, "value": number * self.data_parallel}
        return None

    def tensor(self, name: str, path: tuple, pieces: list[dict], ranks: list[int]) -> dict:
        if self.arrays is not None:  # a tensor dump: each piece's tensor is merged beside its summary
            pieces = [dict(piece, **{ARRAY: self.arrays.load(rank, piece)}) for piece, rank in zip(pieces, ranks)]
        declared = self.declared is not None and not any("shard" in piece for piece in pieces)
        if declared:
            pieces = self.declared_shards(name, path, pieces, ranks)
        if any("shard" in piece for piece in pieces):
            if not all("shard" in piece for piece in pieces):
                raise self._unmergeable(name, path, pieces, ranks, "is a DTensor on some ranks only")
            merged = self.dtensor(name, path, pieces, ranks, "declared tensor_parallel" if declared else "DTensor")
        else:
            merged = self.plain_tensor(name, path, pieces, ranks)
            merged["merged"] = merged.get("merged") or "alike on every rank"
        array = merged.pop(ARRAY, None)
        merged.pop("data_name", None)
        file_name = next((piece["data_name"] for piece in pieces if isinstance(piece.get("data_name"), str)), None)
        if array is not None and self.arrays is not None and file_name:  # under the name each rank gave it
            merged["data_name"] = self.arrays.save(file_name, array)
        return merged

    # -- a declared layout of plain tensors (config.json's tensor_parallel) ------------------------------------
    def _declared_rule(self, name: str) -> dict | None:
        assert self.declared is not None
        module = self.module_of(name)
        if module is None:
            return None
        if module not in self._rules:
            patterns = self.declared["modules"].items()
            self._rules[module] = next((rule for pattern, rule in patterns if fnmatch(module, pattern)), None)
        return self._rules[module]

    def _read_declared_calls(self, names: list[str]) -> None:
        """Within each call of a declared module (its calls share a parent in construct.json), the collectives
        it makes, and the calls after the first of them: before it a row-parallel layer's values are partial
        sums, after it (the bias added to the reduced sum) they are whole."""
        reduced: set[str] = set()  # module calls whose collective has been seen
        for name in names:
            if module_path(name) is not None or self._declared_rule(name) is None:
                continue
            parent = next((c.get(name) for c in self.constructs if isinstance(c.get(name), str)), None)
            if name.startswith("Distributed."):
                self._layout_collectives.add(name)
                reduced.add(str(parent))
            elif str(parent) in reduced:
                self._after_collective.add(name)

    def declared_shards(self, name: str, path: tuple, pieces: list[dict], ranks: list[int]) -> list[dict]:
        """The pieces annotated as the DTensor shards the declared layout says they are, so they merge as
        DTensors do; unchanged where no declared module's rule covers them."""
        assert self.declared is not None
        group = self.declared["ranks"] or sorted(self.dumps)
        if sorted(ranks) != sorted(group) or not pieces or not path:
            return pieces
        rule = self._declared_rule(name)
        if rule is None:
            return pieces
        if name in self._after_collective:  # a forward call; only forward outputs are partial sums
            rule = {**rule, "calls": None}
        own = module_path(name) is not None
        placement = _declared_placement(name, path, pieces[0], rule, own=own)
        if placement is None and not own and self._input_gradient(name, path, pieces[0], rule):
            placement = "P(sum)"
        if placement is None:
            return pieces
        shape = list(pieces[0]["shape"])
        if placement == "P(sum)":
            global_shape = shape
        else:
            if not shape:
                return pieces
            dim = int(placement[2:-1]) % len(shape)
            if any(len(piece["shape"]) != len(shape) for piece in pieces):
                raise self._unmergeable(name, path, pieces, ranks, "has tensors of different ranks (dimensions)")
            global_shape = [*shape[:dim], sum(int(piece["shape"][dim]) for piece in pieces), *shape[dim + 1 :]]
            placement = f"S({dim})"
        mesh = {"shape": [len(group)], "id": "declared", "dim_names": ["tp"]}
        return [
            dict(piece, shard={"placements": [placement], "global_shape": global_shape,
                               "mesh": {**mesh, "coordinate": [group.index(rank)]}})
            for piece, rank in zip(pieces, ranks)
        ]  # fmt: skip

    def _input_gradient(self, name: str, path: tuple, piece: dict, rule: dict) -> bool:
        """In a module whose output is split (column-parallel), a backward call's gradient of a value of the
        golden run's own shape: the gradient of the module's input, which each rank makes from its own columns
        (a partial sum, all-reduced after it by the layout's collective)."""
        if rule.get("output") is None or direction(name) != "backward" or path[0] != "output":
            return False
        golden = self.expected(name, path) if self.expected is not None else None
        return is_tensor(golden) and list(golden["shape"]) == list(piece.get("shape") or [])

    # -- the pieces' tensors, merged as their statistics are ----------------------------------------------
    @staticmethod
    def _arrays_into(merged: dict, pieces: list[dict], combine: Callable[[list], Any]) -> dict:
        arrays = [piece.get(ARRAY) for piece in pieces]
        if all(array is not None for array in arrays):
            try:
                merged[ARRAY] = combine(arrays)
            except ValueError:  # shapes that do not fit: the statistics stand alone
                merged.pop(ARRAY, None)
        return merged

    def _tiled(self, pieces: list[dict], dim: int, ranks: list[int]) -> dict:
        merged = self._arrays_into(stats.tiled(pieces, dim), pieces, lambda arrays: np.concatenate(arrays, dim))
        start, where = 0, []
        for piece, rank in zip(pieces, ranks):
            size = int(piece["shape"][dim])
            where.append([rank, start, start + size])
            start += size
        merged["pieces"] = {"dim": dim, "ranks": where}  # where each rank's piece is: its part of an answer
        return merged

    def _summed(self, pieces: list[dict]) -> dict:
        return self._arrays_into(stats.summed(pieces), pieces, lambda arrays: np.sum(arrays, axis=0))

    def _averaged(self, pieces: list[dict]) -> dict:
        return self._arrays_into(stats.averaged(pieces), pieces, lambda arrays: np.mean(arrays, axis=0))

    @staticmethod
    def _scaled(piece: dict, factor: float) -> dict:
        merged = stats.scaled(piece, factor)
        if piece.get(ARRAY) is not None:
            merged[ARRAY] = piece[ARRAY] * factor
        return merged

    # -- DTensors -------------------------------------------------------------------------------------
    def dtensor(self, name: str, path: tuple, pieces: list[dict], ranks: list[int], kind: str = "DTensor") -> dict:
        meshes = {piece["shard"].get("mesh", {}).get("id") for piece in pieces}
        if len(meshes) > 1:  # the same DTensor on several meshes: one per group of ranks, merged apart
            groups: dict[Any, list[int]] = {}
            for index, piece in enumerate(pieces):
                groups.setdefault(piece["shard"]["mesh"].get("id"), []).append(index)
            merged = [self.dtensor(name, path, [pieces[i] for i in group], [ranks[i] for i in group], kind)
                      for group in groups.values()]  # fmt: skip
            return self.plain_tensor(name, path, merged, [ranks[group[0]] for group in groups.values()])
        first = pieces[0]["shard"]
        mesh_shape = list(first["mesh"]["shape"])
        placements = [_placement(text, name, ranks[0]) for text in first["placements"]]
        held = {tuple(piece["shard"]["mesh"]["coordinate"]): (piece, rank) for piece, rank in zip(pieces, ranks)}
        expected_count = math.prod(mesh_shape)
        if len(held) != expected_count:
            have = sorted(held)
            raise DataFileError(
                self.dumps[ranks[0]].path,
                f"{name} {_where(path)}: a DTensor on a mesh of {expected_count} ranks {mesh_shape}, but only "
                f"{len(held)} are here (coordinates {have}); merge every rank of the run",
            )
        # mesh dimension by mesh dimension, the last first: the pieces that differ only there become one
        current = dict(held)
        for mesh_dim in reversed(range(len(mesh_shape))):
            combined: dict[tuple, tuple[dict, int]] = {}
            for rest in sorted({c[:mesh_dim] + c[mesh_dim + 1 :] for c in current}):
                keys = [(*rest[:mesh_dim], i, *rest[mesh_dim:]) for i in range(mesh_shape[mesh_dim])]
                group = [current[key] for key in keys]
                piece = self._combine(name, path, [p for p, _ in group], [r for _, r in group], placements[mesh_dim])
                combined[rest] = (piece, group[0][1])
            current = combined
        ((merged, _),) = current.values()
        global_shape = list(first["global_shape"])
        if list(merged["shape"]) != global_shape:
            raise DataFileError(
                self.dumps[ranks[0]].path,
                f"{name} {_where(path)}: shards of shape {[p['shape'] for p in pieces]} do not tile the global "
                f"shape {global_shape} (placements {first['placements']}, mesh {mesh_shape}); rank {ranks[0]}",
            )
        merged["merged"] = f"{kind} {','.join(first['placements'])} over ranks {_span(ranks)}"
        return merged

    def _combine(self, name: str, path: tuple, group: list[dict], ranks: list[int], placement: tuple) -> dict:
        kind, detail = placement
        if kind == "shard":
            dim = detail if detail >= 0 else len(group[0]["shape"]) + detail
            return self._tiled(group, dim, ranks)
        if kind == "partial":
            if detail in ("max", "min"):
                return self._extreme_of(group, detail)
            return self._summed(group)
        if not stats.same(group):
            return self._odd_ones(name, path, group, ranks, "a replicated tensor")
        return dict(group[0])

    @staticmethod
    def _extreme_of(group: list[dict], op: str) -> dict:
        merged = stats.summed(group)
        values = [stats.number(piece.get("Max" if op == "max" else "Min")) for piece in group]
        merged["Max" if op == "max" else "Min"] = None if None in values else (max if op == "max" else min)(values)
        merged["Mean"] = merged["Norm"] = None
        merged.pop("Sum", None)
        return merged

    # -- plain tensors --------------------------------------------------------------------------------
    def plain_tensor(self, name: str, path: tuple, pieces: list[dict], ranks: list[int]) -> dict:
        if len(pieces) == 1:
            return dict(pieces[0])
        if (any(piece.get("parameter") for piece in pieces) or name.endswith("parameters_grad")) and not (
            self._shards_of_the_global(name, path, pieces)
        ):
            if not stats.same(pieces):
                what = "a parameter" if any(p.get("parameter") for p in pieces) else "a parameter's gradient"
                kept = self._odd_ones(name, path, pieces, ranks, f"{what} (which every rank must share)")
                return kept | {"merged": "the ranks differ: a piece alike the global run's, else rank 0's"}
            return dict(pieces[0])
        shapes = [list(piece["shape"]) for piece in pieces]
        if any(len(shape) != len(shapes[0]) for shape in shapes):
            raise self._unmergeable(name, path, pieces, ranks, "has tensors of different ranks (dimensions)")
        expected = self.expected(name, path) if self.expected is not None else None
        expected_shape = expected.get("shape") if isinstance(expected, dict) else None
        data_parallel = self.data_parallel > 1
        # the global run's shape decides first: shares whose statistics happen to agree are still shares
        dim = _tiling_dim(shapes, expected_shape)
        # with no other run to ask, pieces of a data-parallel run that agree are still each rank's share when
        # they have a batch dimension beside their features (a gradient of -1/n at each target: the same
        # statistics, other rows); a vector or a number alike on every rank is one value, as is what the optimizer
        # is given (the averaged gradients)
        shares = data_parallel and expected_shape is None and len(shapes[0]) >= 2 and self.phase_of(name) != "optimizer"
        if dim is None and stats.same(pieces) and expected_shape in (None, shapes[0]) and not shares:
            return dict(pieces[0])
        if dim is None and data_parallel and expected_shape is None and shapes[0]:
            dim = 0  # no other run to ask: a data-parallel share of the batch, along the batch dimension
        if dim is not None:
            merged = self._tiled(pieces, dim, ranks)
            how = f"side by side along dimension {dim} over ranks {_span(ranks)}"
            if data_parallel and _is_backward(name):
                merged = self._scaled(merged, 1.0 / self.data_parallel)
                how += f", times 1/{self.data_parallel} (each rank's loss is the mean over its share)"
        elif data_parallel:
            merged = self._averaged(pieces)
            how = f"averaged over ranks {_span(ranks)}"
        else:  # tensor parallelism: a plain tensor of the global shape is replicated, and must be alike
            kept = self._odd_ones(name, path, pieces, ranks, "a tensor every rank should hold whole")
            return kept | {"merged": "the ranks differ: a piece alike the global run's, else rank 0's"}
        merged["merged"] = how
        return merged

    def _shards_of_the_global(self, name: str, path: tuple, pieces: list[dict]) -> bool:
        """Whether the ranks' pieces of a parameter tile the global run's (a plain-tensor model-parallel weight
        the optimizer is handed: its shards, as the layout declares them), rather than each being it whole."""
        if self.data_parallel > 1 or self.expected is None:
            return False
        expected = self.expected(name, path)
        shape = expected.get("shape") if isinstance(expected, dict) else None
        shapes = [list(piece.get("shape") or []) for piece in pieces]
        return shape is not None and _tiling_dim(shapes, shape) is not None

    def _odd_ones(self, name: str, path: tuple, pieces: list[dict], ranks: list[int], what: str) -> dict:
        """Report the ranks whose piece of a value they must share differs, and return a good piece.

        The odd ranks are those whose piece is not the global run's (when that run is at hand, of the same
        shape), else those that differ from the most common piece (with two ranks: both, since either may be
        the odd one)."""
        expected = self.expected(name, path) if self.expected is not None else None
        if is_tensor(expected) and list(expected["shape"]) == list(pieces[0]["shape"]):
            good = [stats.close(piece, expected) for piece in pieces]
        else:
            counts = [sum(stats.same([piece, other]) for other in pieces) for piece in pieces]
            good = [count == max(counts) and count > len(pieces) / 2 for count in counts]
        odd = [rank for rank, fine in zip(ranks, good) if not fine] or list(ranks)
        kept = next((piece for piece, fine in zip(pieces, good) if fine), pieces[0])
        others = [rank for rank in ranks if rank not in odd]
        reference = f"rank {others[0]}'s" if others else "the global run's" if is_tensor(expected) else "the others'"
        if is_tensor(expected) and not others:
            kept_text = _stats_text(expected)
        else:
            kept_text = _stats_text(kept)
        odd_text = _stats_text(pieces[ranks.index(odd[0])])
        words = f"{{hold}} another value of {what}: {odd_text}, where {reference} is {kept_text}"
        self.findings.append(Finding(name, _where(path), odd, words, module=self.module_of(name)))
        return dict(kept)

    def _unmergeable(self, name: str, path: tuple, values: list, ranks: list[int], words: str) -> DataFileError:
        return DataFileError(
            self.dumps[ranks[0]].path,
            f"{name} {_where(path)} {words} (ranks {_span(ranks)}): these ranks' layouts cannot be merged",
        )


def _tiling_dim(shapes: list[list[int]], expected: list[int] | None) -> int | None:
    """The one dimension along which the pieces add up to ``expected`` (the others alike)."""
    if not expected or len(expected) != len(shapes[0]):
        return None
    found = [
        dim
        for dim in range(len(expected))
        if sum(shape[dim] for shape in shapes) == expected[dim]
        and all(shape[other] == expected[other] for shape in shapes for other in range(len(expected)) if other != dim)
    ]
    return found[0] if len(found) == 1 else None


def _declared_placement(name: str, path: tuple, piece: dict, rule: dict, own: bool) -> str | None:
    """The placement (``S(d)``, ``P(sum)``) a declared module's rule gives this tensor, or None: its
    parameters and their gradients by their dimensions, its own output (forward) and the gradient of that
    output (backward, ``input``), and, with ``calls: partial``, the outputs of the calls made inside it."""
    if name.endswith("parameters_grad") or piece.get("parameter") or path[0] == "parameters":
        dim = rule.get("weight") if len(piece.get("shape") or []) >= 2 else rule.get("bias")
        return None if dim is None else f"S({dim})"
    forward = direction(name) == "forward"
    if own:
        if path[0] == ("output" if forward else "input") and rule.get("output") is not None:
            return f"S({rule['output']})"
        return None
    if path[0] == "output" and forward and rule.get("calls") == "partial":
        return "P(sum)"
    return None


def _declared_layout(dumps: dict[int, Dump]) -> dict[str, Any] | None:
    """The ``tensor_parallel`` layout the ranks' headers declare (from their config.json), checked: it comes
    from a file, and a malformed one, or ranks that declare different layouts, is one clear line naming it."""
    from pydantic import ValidationError

    from msprobe.core.config import TensorParallelSection

    found: tuple[int, dict[str, Any]] | None = None
    for rank, dump in sorted(dumps.items()):
        declared = (dump.parallel or {}).get("tensor_parallel")
        if declared is None:
            continue
        where = f"rank {rank}: parallel.tensor_parallel"
        try:  # the config's own rules, since the header is the config's section as the run wrote it
            layout = TensorParallelSection.model_validate(declared).model_dump(exclude_none=True)
        except ValidationError as exc:
            loc = exc.errors()[0].get("loc", ())
            if len(loc) >= 2 and loc[0] == "modules":
                raise DataFileError(dump.path, f"{where}.modules[{loc[1]!r}] is not a module's layout") from None
            raise DataFileError(
                dump.path, f"{where} is not a layout ('ranks': a list of ranks, 'modules': patterns)"
            ) from None
        if found is not None and found[1] != layout:
            raise DataFileError(dump.path, f"{where} differs from rank {found[0]}'s: the ranks must declare one layout")
        found = found or (rank, layout)
    return None if found is None else found[1]


def _is_backward(name: str) -> bool:
    return ".backward" in name or name.endswith("parameters_grad")


def _placement(text: str, name: str, rank: int) -> tuple[str, Any]:
    match = _PLACEMENT.match(str(text))
    if match is None:
        raise DataFileError(Path(name), f"rank {rank}: placement {text!r} is none of S(d), R, P(op)")
    if match["dim"] is not None:
        return "shard", int(match["dim"])
    if match["replicate"]:
        return "replicate", None
    return "partial", match["op"] or "sum"


def _span(ranks: Sequence[int]) -> str:
    ranks = sorted(ranks)
    if len(ranks) > 2 and ranks == list(range(ranks[0], ranks[-1] + 1)):
        return f"{ranks[0]}-{ranks[-1]}"
    return ", ".join(map(str, ranks))


def _text(values: list[Any]) -> str:
    shown = [value.get("value") if isinstance(value, dict) and "value" in value else value for value in values]
    return ", ".join(repr(value) for value in shown[:3])


def _stats_text(piece: dict) -> str:
    return ", ".join(f"{key} {piece.get(key)}" for key in ("Max", "Min", "Mean") if piece.get(key) is not None)


def _renamed(entries: dict[str, Any], ddp: bool) -> dict[str, Any]:
    renamed = {}
    for name, entry in entries.items():
        new = canonical(name, ddp)
        if new is not None:
            renamed[new] = entry
    return renamed


def _renamed_construct(construct: dict[str, Any], ddp: bool) -> dict[str, Any]:
    renamed = {}
    for name, parent in construct.items():
        new = canonical(name, ddp)
        if new is None:
            continue
        renamed[new] = canonical(parent, ddp) if isinstance(parent, str) else parent
    return renamed


def merge_ranks(
    dumps: dict[int, Dump],
    expected: ExpectedShape | None = None,
    arrays: TensorFiles | None = None,
    own: list[str] | None = None,
) -> MergedStep:
    """The ranks of one step (``{rank: dump}``, every rank of the run) merged into the global run; in a tensor
    dump, with ``arrays``, their tensors too. The calls made inside the modules ``own`` names (and those a
    rank's declared layout says are its own) are left out, as the other run's are."""
    if not dumps:
        raise DataFileError(Path("."), "no rank to merge")
    patterns = [*(own or []), *own_patterns(dump.parallel for dump in dumps.values())]
    dumps = {rank: without_own_calls(dump, patterns) for rank, dump in dumps.items()}
    world = {dump.parallel.get("world_size") for dump in dumps.values() if dump.parallel}
    if len(world) == 1:
        size = world.pop()
        missing = sorted(set(range(size)) - set(dumps))
        if missing:
            first = dumps[min(dumps)]
            raise DataFileError(
                first.folder.parent,
                f"holds {len(dumps)} of the run's {size} ranks (missing: {_span(missing)}): nothing is merged "
                "from a partial set of ranks",
            )
    groups = tensor_parallel_groups(dumps)
    if groups is not None:
        return _merge_tensor_parallel_stages(groups, expected, arrays)
    stages = pipeline_stages(dumps)
    if stages is not None:
        merged, stage_of = merge_stages(dumps, stages, arrays)
        return MergedStep(merged, sorted(dumps), stage_of=stage_of)
    replicas = pipeline_replicas(dumps)
    if replicas is not None:
        return _merge_replicas(replicas, expected, arrays)
    return _Merger(dumps, expected, arrays).merge()


def _held_by_stages(findings: list[Finding], holders: list[dict[str, int]]) -> None:
    """Findings of a merge of whole pipelines (one per replica or tensor-parallel index ``i``) told in the
    ranks that hold the entries: ``holders[i]`` maps each merged entry to the rank of the stage that made it."""
    for finding in findings:

        def rank_of(index: int, entry: str = finding.entry) -> int:
            return holders[index].get(entry, index) if 0 <= index < len(holders) else index

        finding.ranks = [rank_of(index) for index in finding.ranks]
        finding.words = re.sub(r"\brank (\d+)", lambda match: f"rank {rank_of(int(match[1]))}", finding.words)


def _merge_tensor_parallel_stages(
    groups: list[dict[int, Dump]], expected: ExpectedShape | None, arrays: TensorFiles | None
) -> MergedStep:
    """Pipeline stages that are each tensor parallel: the stages of each tensor-parallel index (every group's
    ``t``-th rank) merged into a run of the whole model, then those runs merged by the declared layout, with
    the golden run's shapes to guide them. An entry is named with its stage's ranks; what the tensor-parallel
    ranks disagree on, with the rank of the stage that holds it."""
    first = next(iter(groups[0].values()))
    if arrays is not None:
        raise DataFileError(
            first.folder.parent,
            "pipeline stages that are also tensor parallel merge from their statistics: compare a statistics dump",
        )
    orders = [list(next(iter(group.values())).parallel["tensor_parallel"]["ranks"]) for group in groups]
    declared = dict(next(iter(groups[0].values())).parallel["tensor_parallel"])
    size = len(orders[0])
    wholes: dict[int, Dump] = {}
    holders: list[dict[str, int]] = []
    for index in range(size):
        line = {order[index]: replace(group[order[index]], parallel={"world_size": len(groups), "rank": stage})
                for stage, (group, order) in enumerate(zip(groups, orders))}  # fmt: skip
        stages = pipeline_stages(line)
        if stages is None:
            raise DataFileError(
                first.folder.parent,
                f"the tensor-parallel groups {', '.join(str(order) for order in orders)} are not pipeline stages "
                "(each must hold modules no other group holds): nothing is merged",
            )
        whole, held = merge_stages(line, stages)
        whole.parallel = {"world_size": size, "rank": index,
                          "tensor_parallel": {**declared, "ranks": list(range(size))}}  # fmt: skip
        wholes[index] = whole
        holders.append(held)
    step = _Merger(wholes, expected).merge()
    _held_by_stages(step.findings, holders)  # index t's value is held by the rank of the stage that made it
    group_of = {rank: sorted(order) for order in orders for rank in order}
    step.stage_of = {name: group_of[rank] for name, rank in holders[0].items() if rank in group_of}
    step.ranks = sorted(group_of)
    step.dump.parallel = {**(step.dump.parallel or {}), "merged_ranks": step.ranks, "world_size": len(step.ranks),
                          "pipeline_tensor_parallel": [sorted(order) for order in orders]}  # fmt: skip
    return step


def _merge_replicas(
    replicas: list[dict[int, Dump]], expected: ExpectedShape | None, arrays: TensorFiles | None
) -> MergedStep:
    """A pipeline whose stages are data parallel: each replica's stages merged into a run of the whole model,
    then the replicas merged as data parallelism defines it. What the replicas disagree on is named with the
    rank of the stage that holds it."""
    first = next(iter(replicas[0].values()))
    if arrays is not None:
        raise DataFileError(
            first.folder.parent,
            "pipeline stages that are also data parallel merge from their statistics: compare a statistics dump",
        )
    kind = (first.parallel or {}).get("data_parallel", {}).get("kind")
    wholes: dict[int, Dump] = {}
    holders: list[dict[str, int]] = []
    for index, replica in enumerate(replicas):
        stages = pipeline_stages(replica, replicas=True)
        assert stages is not None  # pipeline_replicas checked it
        whole, held = merge_stages(replica, stages)
        whole.parallel = {"world_size": len(replicas), "rank": index,
                          "data_parallel": {"ranks": list(range(len(replicas))), "kind": kind}}  # fmt: skip
        wholes[index] = whole
        holders.append({canonical(name, kind == "ddp") or name: rank for name, rank in held.items()})
    step = _Merger(wholes, expected).merge()
    _held_by_stages(step.findings, holders)  # replica d's value is held by the rank of the stage that made it
    step.ranks = sorted(rank for replica in replicas for rank in replica)
    step.dump.parallel = {**(step.dump.parallel or {}), "merged_ranks": step.ranks, "world_size": len(step.ranks),
                          "pipeline_replicas": [sorted(replica) for replica in replicas]}  # fmt: skip
    return step


def values_of(dump: Dump) -> ExpectedShape:
    """The global run's value at (entry, path) in ``dump`` (a run of one process), to guide the merge."""
    ddp = bool(dump.parallel and (dump.parallel.get("data_parallel") or {}).get("kind") == "ddp")
    data = _renamed(dump.data, ddp)

    def value_at(name: str, path: tuple) -> Any:
        value = data.get(name)
        for part in path:
            if isinstance(value, list) and isinstance(part, int) and part < len(value):
                value = value[part]
            elif isinstance(value, dict) and part in value:
                value = value[part]
            else:
                return None
        return value

    return value_at
