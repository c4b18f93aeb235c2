"""What a sharded run's dump records of its layout, so that its ranks can be merged into one global run.

- A DTensor's entry describes its local shard (shape, statistics, checksum) and, under ``shard``, the global
  shape, the placements, the device mesh, this rank's coordinate on it and the shard's offset.
- In a run of several processes every tensor also carries ``Sum`` and ``SumSq`` in float64, which merge exactly
  across shards, and a parameter says so (``parameter``): it must be alike on every data-parallel rank.
- dump.json's header holds ``parallel``: the world, this rank, and the data-parallel group (DDP, FSDP2).
- The calls the parallel framework makes for itself (FSDP2's gather, copy-out and reduce, DTensor's
  redistribution) are left out of the dump: they are no call of the user's code, and the golden run of
  another layout has none of them.

Nothing here imports torch.distributed: it is read from ``sys.modules`` once the user's script has imported it.
"""

from __future__ import annotations

import json
import sys
import zlib
from collections.abc import Iterator
from typing import Any

import torch

from msprobe.core.api_patch import ApiPatcher, call_site, unrecorded
from msprobe.core.dump import float_stats
from msprobe.pytorch.dump import measuring


def world() -> tuple[int, int] | None:
    """(rank, world size) of an initialised process group of more than one process, else None."""
    dist = sys.modules.get("torch.distributed")
    if dist is None or not dist.is_available() or not dist.is_initialized():
        return None
    size = dist.get_world_size()
    return (dist.get_rank(), size) if size > 1 else None


def _dtensor_class() -> type | None:
    module = sys.modules.get("torch.distributed.tensor")
    return getattr(module, "DTensor", None) if module is not None else None


def is_dtensor(tensor: Any) -> bool:
    if type(tensor) is torch.Tensor:
        return False
    dtensor = _dtensor_class()
    return dtensor is not None and isinstance(tensor, dtensor)


def mesh_id(ranks: list[int]) -> str:
    """A short name for a device mesh, the same on every rank of it: its first rank, size and a digest."""
    digest = zlib.crc32(",".join(map(str, ranks)).encode())
    return f"{min(ranks)}-{len(ranks)}-{digest:08x}"


# (mesh id, placements, shape) -> (mesh, record, the record as compact JSON text)
_SHARDS: dict[tuple, tuple[Any, dict[str, Any], str]] = {}


def _shard_found(tensor: Any) -> tuple[Any, dict[str, Any], str]:
    """The cached record of where a DTensor's shard sits (made once for each mesh, placements and shape: reading
    a mesh's ranks and a shard's offset costs more than the dump's statistics)."""
    spec = tensor._spec
    mesh = spec.mesh
    placements = tuple(spec.placements)
    key = (id(mesh), placements, tuple(tensor.shape))
    found = _SHARDS.get(key)
    if found is None or found[0] is not mesh:
        if len(_SHARDS) > 4096:
            _SHARDS.clear()
        record = _shard_record(tensor, mesh, placements)
        found = _SHARDS[key] = (mesh, record, json.dumps(record, separators=(",", ":")))
    return found


def shard_of(tensor: Any) -> tuple[torch.Tensor, dict[str, Any]]:
    """A DTensor's local tensor, and the record of where it sits in the global tensor (a copy: the caller's)."""
    record = _shard_found(tensor)[1]
    return tensor._local_tensor, {**record, "mesh": dict(record["mesh"])}


def shard_text(tensor: Any) -> str:
    """The record of where a DTensor's shard sits, as JSON text (shared: the per-call path splices it in)."""
    return _shard_found(tensor)[2]


def _shard_record(tensor: Any, mesh: Any, placements: tuple) -> dict[str, Any]:
    offset = None
    try:
        from torch.distributed.tensor._utils import compute_local_shape_and_global_offset

        offset = list(compute_local_shape_and_global_offset(tensor.shape, mesh, placements)[1])
    except Exception:  # a torch without it: the merge tiles the shards by their coordinates
        offset = None
    ranks = mesh.mesh.flatten().tolist()
    return {
        "global_shape": list(tensor.shape),
        "placements": [str(placement) for placement in placements],
        "mesh": {
            "id": mesh_id(ranks),
            "shape": list(mesh.shape),
            "dim_names": list(mesh.mesh_dim_names) if mesh.mesh_dim_names else None,
            "coordinate": list(mesh.get_coordinate() or []),
        },
        "offset": offset,
    }


def waited_collective(tensor: Any) -> torch.Tensor | None:
    """The plain tensor that an asynchronous collective's result (torch's ``AsyncCollectiveTensor``: tensor
    parallelism's all-reduced output) holds, waited for as any operation on it would; None for any other."""
    module = sys.modules.get("torch.distributed._functional_collectives")
    kind = getattr(module, "AsyncCollectiveTensor", None) if module is not None else None
    if kind is None or type(tensor) is not kind:
        return None
    waited = tensor.trigger_wait()
    return waited if type(waited) is torch.Tensor else None


def plain(tensor: torch.Tensor) -> torch.Tensor:
    """A tensor a file can hold and ``torch.load(weights_only=True)`` read back: the result of an asynchronous
    collective (torch's ``AsyncCollectiveTensor``, which tensor parallelism's all-reduce returns) waited for and
    unwrapped. Other tensors as they are."""
    if type(tensor) is torch.Tensor:
        return tensor
    wait = getattr(tensor, "trigger_wait", None)
    if callable(wait):
        waited = wait()
        if isinstance(waited, torch.Tensor):
            return waited
    return tensor


def float64_sums(tensor: torch.Tensor) -> tuple[float, float]:
    """The sum and the sum of squares of a tensor's values in float64: they add up exactly across shards. Read
    in one pass in C for a CPU float32 or float64 tensor in memory of its own (the usual case), else in torch."""
    data = tensor.detach()
    if data.is_complex() or data.is_meta or not data.numel():
        return 0.0, 0.0
    kind = _SUMMED_IN_C.get(data.dtype)
    if kind is not None and data.is_cpu and float_stats.AVAILABLE:
        address = measuring.plain_memory(data)
        if address is not None:
            found = float_stats.sums_at(address, data.numel(), kind)
            if found is not None:
                return found
    flat = data.reshape(-1).to(torch.float64)
    return float(flat.sum().item()), float(torch.dot(flat, flat).item())


_SUMMED_IN_C = {torch.float32: float_stats.FLOAT32, torch.float64: float_stats.FLOAT64}


def data_parallel_group(model: Any) -> dict[str, Any] | None:
    """The data-parallel group of a model wrapped in DDP, or sharded with FSDP2: its kind and ranks."""
    dist = sys.modules.get("torch.distributed")
    if dist is None or model is None:
        return None
    models = model if isinstance(model, (list, tuple)) else [model]
    parallel = sys.modules.get("torch.nn.parallel")
    ddp = getattr(parallel, "DistributedDataParallel", None) if parallel is not None else None
    for item in models:
        if ddp is not None and isinstance(item, ddp):
            group = getattr(item, "process_group", None)
            ranks = dist.get_process_group_ranks(group) if group is not None else list(range(dist.get_world_size()))
            return {"kind": "ddp", "ranks": sorted(ranks)}
        found = _fsdp_mesh_ranks(item)
        if found is not None:
            return {"kind": "fsdp2", "ranks": found}
    return None


def _fsdp_mesh_ranks(model: Any) -> list[int] | None:
    fsdp = sys.modules.get("torch.distributed.fsdp")
    module_class = getattr(fsdp, "FSDPModule", None) if fsdp is not None else None
    if module_class is None or not isinstance(model, torch.nn.Module):
        return None
    for module in model.modules():
        if not isinstance(module, module_class):
            continue
        for parameter in module.parameters():
            if is_dtensor(parameter):  # the sharded parameter lives on the data-parallel mesh
                return sorted(parameter._spec.mesh.mesh.flatten().tolist())
    return None


def header(model: Any, declared: dict[str, Any] | None = None) -> dict[str, Any] | None:
    """dump.json's ``parallel`` field for this process, or None outside a run of several processes; with the
    config's declared tensor-parallel layout of plain tensors, which the merge reads."""
    found = world()
    if found is None:
        return None
    rank, size = found
    layout: dict[str, Any] = {"world_size": size, "rank": rank}
    group = data_parallel_group(model)
    if group is not None:
        layout["data_parallel"] = group
    if declared:
        layout["tensor_parallel"] = declared
    return layout


# The parallel framework's own work: each is a function or method run around the user's code, never by it.
_FRAMEWORK = (
    ("torch.distributed.tensor._api", "_ToTorchTensor", ("forward", "backward")),
    ("torch.distributed.tensor._api", "_FromTorchTensor", ("forward", "backward")),
    ("torch.distributed.tensor._redistribute", "Redistribute", ("forward", "backward")),
    (
        "torch.distributed.fsdp._fully_shard._fsdp_param_group",
        "FSDPParamGroup",
        (
            "unshard",
            "wait_for_unshard",
            "reshard",
            "pre_forward",
            "post_forward",
            "pre_backward",
            "post_backward",
            "finalize_backward",
        ),
    ),
    ("torch.distributed.fsdp._fully_shard._fsdp_param_group", "RegisterPostBackwardFunction", ("forward", "backward")),
)


def _framework_targets() -> Iterator[tuple[Any, str, str]]:
    for module_name, owner_name, attributes in _FRAMEWORK:
        module = sys.modules.get(module_name)
        owner = getattr(module, owner_name, None) if module is not None else None
        if owner is None:
            continue
        for attribute in attributes:
            if callable(getattr(owner, attribute, None)):
                yield owner, attribute, f"{owner_name}.{attribute}"


@call_site
def _unrecorded_call(original: Any, key: str, args: tuple, kwargs: dict) -> Any:
    with unrecorded():
        return original(*args, **kwargs)


class FrameworkCalls:
    """While installed, the parallel framework's own work runs unrecorded (see the module's docstring).

    The modules are looked for at each install: a script may import FSDP2 or DTensor after the debugger is
    made, and the wrappers go on once they are there."""

    def __init__(self) -> None:
        self._patcher: ApiPatcher | None = None
        self._found: tuple[str, ...] = ()

    def install(self) -> None:
        present = tuple(name for name, _, _ in _FRAMEWORK if name in sys.modules)
        if present != self._found:
            self.remove()
            self._found = present
            self._patcher = ApiPatcher(_unrecorded_call, lambda: list(_framework_targets())) if present else None
        if self._patcher is not None:
            self._patcher.install()

    def remove(self) -> None:
        if self._patcher is not None:
            self._patcher.remove()
