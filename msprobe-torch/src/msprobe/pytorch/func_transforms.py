"""Tensors as ``torch.func`` transforms (vmap, grad) show them to the function they run.

Inside ``vmap`` a function sees one sample at a time through a wrapper on
which ``.item()`` and ``.numpy()`` are refused; the tool reads the plain
tensor beneath instead (under vmap all the samples, the batch dimension
included), with functorch's dispatch switched off while it does.
"""

from __future__ import annotations

import contextlib
from typing import Any

import torch

_functorch = getattr(torch._C, "_functorch", None)
_is_wrapped = getattr(_functorch, "is_functorch_wrapped_tensor", None)


def wrapped(tensor: torch.Tensor) -> bool:
    return _is_wrapped is not None and _is_wrapped(tensor)


def physical(tensor: torch.Tensor) -> torch.Tensor:
    """The plain tensor under every torch.func wrapper (read it inside ``plain_dispatch()``)."""
    while wrapped(tensor):
        tensor = _functorch.get_unwrapped(tensor)
    return tensor


def plain_dispatch() -> Any:
    """Operations run on tensors as they are, not through the transforms in progress."""
    disable = getattr(torch._C, "_DisableFuncTorch", None)
    return disable() if disable is not None else contextlib.nullcontext()
