"""Seeing a call's backward without touching the autograd graph.

Like the reference, an API's backward entry is what the last autograd node
of its output sees: the gradients arriving at the output (``input``) and
those the node passes on (``output``, one per node input, null where none
flows). A hook on that node adds no node and no alias, so nothing the user
does afterwards (in-place updates, views) can be affected. Modules use
tensor hooks on their inputs and outputs instead.
"""

from __future__ import annotations

from typing import Any

import torch


def tensors_requiring_grad(values: Any) -> list[torch.Tensor]:
    found: dict[int, torch.Tensor] = {}
    _walk(values, found)
    return list(found.values())


def _walk(value: Any, found: dict[int, torch.Tensor]) -> None:
    """Leaves are handled in the loop, not by a call each: this runs for every recorded call."""
    if isinstance(value, torch.Tensor):
        if value.requires_grad:
            found.setdefault(id(value), value)
        return
    if isinstance(value, dict):
        value = value.values()
    elif not isinstance(value, (list, tuple)):
        return
    for item in value:
        if isinstance(item, torch.Tensor):
            if item.requires_grad:
                found.setdefault(id(item), item)
        elif isinstance(item, (list, tuple, dict)):
            _walk(item, found)


def output_tensors(output: Any) -> list[torch.Tensor | None]:
    """The flat list of outputs in the order dump.json lists them (non-tensors as None)."""
    if isinstance(output, torch.Tensor):
        return [output]
    if isinstance(output, (list, tuple)):
        return [item if isinstance(item, torch.Tensor) else None for item in output]
    return []


def output_node(output: Any, inputs_before: set[int]) -> Any:
    """The autograd node that produced ``output`` in this call, or None.

    A node that already belonged to an input before the call (an API that
    returned its input unchanged) is not this call's.
    """
    for tensor in output_tensors(output):
        if tensor is not None and tensor.grad_fn is not None:
            node = tensor.grad_fn
            return None if id(node) in inputs_before else node
    return None
