"""A torch tensor's statistics and checksums, measured on their own, as the reference measures them.

Statistics follow the reference's semantics (bool: Max=any, Min=all;
0-d: the value four times; integers measured as float32; complex on
magnitudes; an inf or nan extreme adds its *_except_inf_nan key; empty:
the four keys, null) except that float64 is measured in float64, not
float32. On the CPU one pass in C reads the four; elsewhere torch's
reductions do, stacked so that a device is read once per tensor. The
reductions here are torch's own, never the dump's wrappers around them:
the device batch and the summarizer call them through this module, so a
test that replaces one replaces it for both.
"""

from __future__ import annotations

import math
from typing import Any

import torch

from msprobe.core.dump import float_stats
from msprobe.core.dump.checksum import crc32_hex as checksum_hex
from msprobe.core.dump.checksum import xor_hex
from msprobe.core.dump.numbers import float32_mean, json_number
from msprobe.pytorch.dump.pt_file import host_bytes

MEASURED_AS_IS = (torch.float32, torch.float64)
KERNEL_KINDS = {torch.float32: float_stats.FLOAT32, torch.float64: float_stats.FLOAT64}
PLAIN_TYPES = (torch.Tensor, torch.nn.Parameter)  # no subclass that keeps its values elsewhere
SCREEN_KINDS = {**KERNEL_KINDS, torch.float16: float_stats.FLOAT16, torch.bfloat16: float_stats.BFLOAT16}


EXCEPT_INF_NAN = ("Max_except_inf_nan", "Min_except_inf_nan")


def unwrapped(function: Any) -> Any:
    return getattr(function, "__msprobe_original__", function)


# the tool's own reductions call torch's functions, not the dump's wrappers around them (one hop less per tensor)
torch_sum = unwrapped(torch.Tensor.sum)
torch_sum_into = unwrapped(torch.sum)  # with dims and out=: into a cell of the batch's buffer
torch_vector_norm = unwrapped(torch.linalg.vector_norm)
torch_aminmax = unwrapped(torch.aminmax)
torch_copy = unwrapped(torch.Tensor.copy_)
torch_mean = unwrapped(torch.mean)


def measure(tensor: torch.Tensor) -> dict[str, Any]:
    if tensor.dtype in KERNEL_KINDS:  # the usual case, first: no detached view to make
        stats = kernel_stats(tensor, nonfinite=True)
        if stats is not None:
            return stats
    data = tensor.detach()
    dtype = data.dtype
    if dtype == torch.bool:
        return {"Max": bool(data.any()), "Min": bool(data.all()), "Mean": None, "Norm": None}
    if data.is_complex():
        data = data.abs()
    if not data.dim():
        return scalar_stats(data.item())
    if dtype not in MEASURED_AS_IS:  # widened from float16, bfloat16, an integer or complex magnitudes
        data = data if data.dtype in MEASURED_AS_IS else data.float()
        stats = kernel_stats(data, nonfinite=True)
        if stats is not None:
            return stats
    low, high = torch.aminmax(data)
    if data.is_cpu:  # no transfer to save: reading the scalars is cheaper than stacking them
        maximum, minimum, mean, norm = high.item(), low.item(), mean_from_sum(data), torch_vector_norm(data).item()
    else:  # one device-to-host transfer for the four
        maximum, minimum, mean, norm = torch.stack((high, low, data.mean(), torch.linalg.vector_norm(data))).tolist()
    stats: dict[str, Any] = {"Max": maximum, "Min": minimum, "Mean": mean, "Norm": norm}
    if math.isfinite(maximum + minimum + mean + norm):  # the usual case: one check for all four
        return stats
    if not (math.isfinite(maximum) and math.isfinite(minimum)):
        stats.update(extremes_except_inf_nan(data, maximum, minimum))
    return {key: json_number(value) for key, value in stats.items()}


def scalar_stats(value: float | int) -> dict[str, Any]:
    """A 0-d tensor's value is all four statistics, as the reference writes them: an int for an integer tensor;
    inf or nan also as its own ``*_except_inf_nan`` pair (the one element is what is left of it)."""
    stats: dict[str, Any] = {"Max": value, "Min": value, "Mean": value, "Norm": value}
    if math.isfinite(value):
        return stats
    stats["Max_except_inf_nan"] = stats["Min_except_inf_nan"] = value
    return {key: json_number(number) for key, number in stats.items()}


def extremes_except_inf_nan(data: torch.Tensor, maximum: float, minimum: float) -> dict[str, float]:
    """As the reference: for an extreme that is inf or nan, the extreme of the finite values, else of those
    that are not nan (only infs left), else nan (all nan). A finite extreme gets no second key."""
    finite = data[torch.isfinite(data)]
    if not finite.numel():
        finite = data[~torch.isnan(data)]
    low, high = torch.aminmax(finite) if finite.numel() else (torch.tensor(math.nan),) * 2
    extremes = {}
    if not math.isfinite(maximum):
        extremes["Max_except_inf_nan"] = high.item()
    if not math.isfinite(minimum):
        extremes["Min_except_inf_nan"] = low.item()
    return extremes


def kernel_stats(data: torch.Tensor, nonfinite: bool = False) -> dict[str, Any] | None:
    """Statistics in one pass in C (see msprobe.core.dump.float_stats), or None where the kernels cannot read.

    ``nonfinite``: data holding an inf or nan is measured in C too, with its ``*_except_inf_nan`` pair, as
    torch would measure it (in torch that takes some ten operations on every such tensor of a step that
    overflowed, or of an attention mask); otherwise it is None, left to the caller.
    """
    if not (float_stats.AVAILABLE and data.is_cpu and data.dim()):
        return None
    address = plain_memory(data)
    if address is None:
        return None
    kind = KERNEL_KINDS[data.dtype]
    values = float_stats.stats_at(address, data.numel(), kind)
    if values is not None:
        return {"Max": values[0], "Min": values[1], "Mean": values[2], "Norm": values[3]}
    found = float_stats.nonfinite_stats_at(address, data.numel(), kind) if nonfinite else None
    if found is None:  # finite values whose float32 norm is beyond float32's range, say
        return None
    maximum, minimum, mean, norm, finite_max, finite_min = found
    stats = {"Max": maximum, "Min": minimum, "Mean": mean, "Norm": norm}
    if not math.isfinite(maximum):
        stats["Max_except_inf_nan"] = finite_max
    if not math.isfinite(minimum):
        stats["Min_except_inf_nan"] = finite_min
    return {key: json_number(value) for key, value in stats.items()}


def plain_memory(data: torch.Tensor) -> int | None:
    """The address of a CPU tensor's values when they fill a block of memory there, in any order; else None.

    A permuted tensor (a transpose, attention's head split) fills its block
    too: statistics do not depend on the order (the sums, kept in double,
    only in the last bits of a double). Subclasses (wrappers, fake tensors)
    and negative views (whose memory holds the values' negation) are left
    to torch.
    """
    if type(data) not in PLAIN_TYPES or data.is_neg() or not data.numel():
        return None
    if data.is_contiguous() or _fills_its_block(data):
        try:
            return data.data_ptr()  # the block's start: torch has no negative strides
        except RuntimeError:  # no storage of its own: torch.func's wrappers (vmap's batched tensors)
            return None
    return None


def _fills_its_block(data: torch.Tensor) -> bool:
    """No gaps and no element twice: with the dimensions sorted by stride, each stride is the size of those before."""
    expected = 1
    for size, stride in sorted(zip(data.shape, data.stride()), key=lambda pair: pair[1]):
        if size == 1:
            continue
        if stride != expected:
            return False
        expected *= size
    return True


def mean_from_sum(data: torch.Tensor) -> float:
    """``data.mean()`` to the last bit, faster on the CPU: torch's sum kernel, then its float division."""
    total = torch_sum(data).item()
    if data.dtype == torch.float32:
        return float32_mean(total, data.numel())
    return total / data.numel()


class DeferredStats:
    """Four statistics still on the device; read back once, when the step's files are written."""

    __slots__ = ("_values", "tensor")

    def __init__(self, tensor: torch.Tensor):
        self.tensor = tensor
        self._values: list | None = None

    def value(self, index: int) -> Any:
        if self._values is None:
            self._values = [json_number(v) for v in self.tensor.tolist()]
            self.tensor = None
        return self._values[index]


class PendingStat:
    """One of the four statistics of a tensor still on its device (``stats``: its four, read together)."""

    __slots__ = ("index", "stats")

    def __init__(self, stats: Any, index: int):
        self.stats, self.index = stats, index

    def resolve(self) -> Any:
        return self.stats.value(self.index)


def measure_deferred(tensor: torch.Tensor) -> dict[str, Any]:
    """Async mode: no host sync per tensor on a device. Inf/nan tensors get no *_except_inf_nan pair there.

    A CPU tensor has no device to wait for: it is measured at once, the same way as without async.
    """
    if tensor.is_cpu or tensor.dtype == torch.bool or tensor.is_complex() or tensor.dim() == 0:
        return measure(tensor)  # nothing to wait for, or rare and cheap: measured at once
    data = tensor.detach()
    if data.dtype not in MEASURED_AS_IS:
        data = data.float()
    low, high = torch.aminmax(data)
    stats = DeferredStats(torch.stack((high, low, data.mean(), torch.linalg.vector_norm(data))))
    return {key: PendingStat(stats, index) for index, key in enumerate(("Max", "Min", "Mean", "Norm"))}


def host_contiguous(tensor: torch.Tensor) -> torch.Tensor:
    data = tensor.detach()
    if not data.is_cpu:
        data = data.cpu()
    return data if data.is_contiguous() else data.contiguous()


def xor_checksum_hex(tensor: torch.Tensor) -> str:
    """``summary_mode: "xor"``: see msprobe.core.dump.checksum.xor_hex."""
    return xor_hex(host_bytes(host_contiguous(tensor)))


def crc32_hex(tensor: torch.Tensor) -> str:
    """CRC-32 of the tensor's bytes (the reference calls it md5), as 8 hex digits; the bytes are read in place."""
    return checksum_hex(host_bytes(host_contiguous(tensor)))
