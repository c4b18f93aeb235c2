"""Nested, sparse and quantized tensors: their statistics and checksums, without a dense copy of a sparse one.

Rare in a dump, so measured afresh each time; the usual tensors pay one type
check for them (``by_kind``).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

import torch

from msprobe.core.dump.checksum import crc32
from msprobe.core.dump.checksum import crc32_hex as checksum_hex
from msprobe.core.dump.numbers import no_statistics
from msprobe.pytorch import func_transforms
from msprobe.pytorch.dump import measuring
from msprobe.pytorch.dump.pt_file import host_bytes


def is_unusual(tensor: torch.Tensor) -> bool:
    return tensor.is_nested or tensor.is_quantized or tensor.layout not in (torch.strided, torch.jagged)


def by_kind(tensor: torch.Tensor, usual: Callable[..., Any], unusual: Callable[..., Any], *args: Any) -> Any:
    """``usual(tensor, *args)``; for a nested, sparse or quantized tensor ``unusual(tensor, *args)``; inside
    torch.func transforms ``usual`` on the tensor beneath (under vmap the whole batch). The usual tensors
    pay one type check: the others are told apart only once ``usual`` has raised.
    """
    if type(tensor) is not torch.Tensor and tensor.is_nested:  # the jagged layout is a subclass
        return unusual(tensor, *args)
    try:
        return usual(tensor, *args)
    except RuntimeError:  # NotImplementedError (an op the layout lacks) included
        if func_transforms.wrapped(tensor):
            with func_transforms.plain_dispatch():
                return usual(func_transforms.physical(tensor), *args)
        if is_unusual(tensor):
            return unusual(tensor, *args)
        raise


def nested_values(tensor: torch.Tensor) -> torch.Tensor:
    """The values a nested tensor holds, components one after another, flat."""
    return torch.cat([component.reshape(-1) for component in tensor.detach().unbind()])


def padded_shape(tensor: torch.Tensor) -> list[int]:
    """A nested tensor's shape when padded: its component count, then the largest size in each dimension."""
    shapes = [component.shape for component in tensor.detach().unbind()]
    return [len(shapes), *(max(sizes) for sizes in zip(*shapes))] if shapes else [0]


def unusual_statistics(tensor: torch.Tensor) -> dict[str, Any]:
    """Statistics of a nested, sparse or quantized tensor, measured afresh each time (rare)."""
    if not tensor.numel():
        return no_statistics()
    if tensor.is_nested:
        return measuring.measure(nested_values(tensor))
    if tensor.is_quantized:
        return measuring.measure(tensor.detach().dequantize())
    return sparse_statistics(tensor)


def sparse_statistics(tensor: torch.Tensor) -> dict[str, Any]:
    """All elements counted, those not stored as the zeros they are; no dense copy is made."""
    data = tensor.detach()
    if data.layout == torch.sparse_coo:
        data = data.coalesce()  # duplicate indices add up
    values = data.values().reshape(-1)
    stored, count = values.numel(), data.numel()
    if not stored:
        zero = False if data.dtype == torch.bool else 0.0
        return {
            "Max": zero,
            "Min": zero,
            "Mean": None if zero is False else 0.0,
            "Norm": None if zero is False else 0.0,
        }
    stats = measuring.measure(values)
    if stored == count:
        return stats
    for high, low in (("Max", "Min"), ("Max_except_inf_nan", "Min_except_inf_nan")):
        if isinstance(stats.get(high), bool):
            stats[low] = False
        elif isinstance(stats.get(high), float):  # not "nan" or "inf" text, not None
            stats[high], stats[low] = max(stats[high], 0.0), min(stats[low], 0.0)
    if isinstance(stats.get("Mean"), float):
        stats["Mean"] = stats["Mean"] * stored / count
    return stats


DENSE_PIECE_BYTES = 16 << 20  # a sparse tensor's dense form is checksummed this much at a time


def sparse_crc32_hex(tensor: torch.Tensor) -> str:
    """CRC-32 of a sparse tensor's dense form, built a block of rows at a time: never the whole dense tensor.

    The CRC equals that of ``tensor.to_dense()`` (the md5 of a dense tensor
    of the same values), while the memory it takes is one block of rows
    (16 MB) beside the stored values: a sparse gradient of an embedding
    table with millions of rows would need gigabytes in its dense form.
    """
    data = tensor.detach()
    data = (data if data.layout == torch.sparse_coo else data.to_sparse_coo()).coalesce()  # sorted by row
    shape, indices, values = data.shape, data.indices(), data.values()
    row_elements = math.prod(shape[1:])
    if not data.numel():
        return checksum_hex(b"")
    rows_per_piece = max(1, DENSE_PIECE_BYTES // max(1, row_elements * data.element_size()))
    starts = torch.arange(0, shape[0], rows_per_piece, device=indices.device)
    bounds = torch.searchsorted(indices[0].contiguous(), torch.cat([starts, starts.new_tensor([shape[0]])])).tolist()
    running = 0
    for piece, first_row in enumerate(starts.tolist()):
        last_row = min(shape[0], first_row + rows_per_piece)
        dense = torch.zeros((last_row - first_row, *shape[1:]), dtype=data.dtype, device=values.device)
        low, high = bounds[piece], bounds[piece + 1]
        if high > low:
            where = indices[:, low:high].clone()
            where[0] -= first_row
            dense[tuple(where)] = values[low:high]
        running = crc32(host_bytes(dense.cpu()), running)
    return f"{running:08x}"
