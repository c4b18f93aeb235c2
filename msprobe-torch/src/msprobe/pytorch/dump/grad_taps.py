"""Seeing a call's backward without touching the autograd graph.

Like the reference, an API's backward entry is what the last autograd node
of its output sees: the gradients arriving at the output (``input``) and
those the node passes on (``output``, one per node input, null where none
flows). A hook on that node adds no node and no alias, so nothing the user
does afterwards (in-place updates, views) can be affected. Modules use
tensor hooks on their outputs, and hooks on the nodes of the call that
consume its inputs (:func:`input_uses`), again adding nothing to the graph.
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


def nodes_of(tensors: list[torch.Tensor]) -> tuple[Any, ...]:
    """The autograd nodes the tensors hang from now: taken before an in-place call, which replaces them."""
    return tuple(t.grad_fn for t in tensors if t.grad_fn is not None)


def output_node(output: Any, nodes_before: tuple[Any, ...]) -> tuple[Any, torch.Tensor | None]:
    """The autograd node that produced ``output`` in this call, or else the output handed back as it came in.

    A node that already belonged to an input before the call is not this
    call's: the call returned that input unchanged (dropout with p=0,
    ``.to`` of the dtype it has). Its output tensor is returned instead
    (with None for the node) so the caller can hook the gradient arriving
    at it, which is what the reference, wrapping the output in a node of
    its own, reports for such a call.
    """
    for tensor in output_tensors(output):
        if tensor is not None and tensor.grad_fn is not None:
            node = tensor.grad_fn
            if any(node is earlier for earlier in nodes_before):
                return None, tensor
            return node, None
    return None, None


_NEXT_SEQUENCE_NR = getattr(torch._C._autograd, "_get_sequence_nr", None)


def next_node_number() -> int:
    """The sequence number the next autograd node made in this thread will get: nodes are numbered as made.

    0 on a torch without the counter: the search in :func:`input_uses` is then bounded by the inputs alone.
    """
    return _NEXT_SEQUENCE_NR() if _NEXT_SEQUENCE_NR is not None else 0


def anchors(inputs: list[Any]) -> list[tuple[bool, Any, int]]:
    """Where each input hangs in the graph before a call: an in-place call (``nn.ReLU(inplace=True)``) moves it.
    A value that is no tensor hangs nowhere."""
    return [
        (t.requires_grad, t.grad_fn, t.output_nr) if isinstance(t, torch.Tensor) else (False, None, 0) for t in inputs
    ]


def input_uses(
    inputs: list[Any],
    outputs: list[torch.Tensor | None],
    first_node: int,
    before: list[tuple[bool, Any, int]] | None = None,
) -> list[tuple[Any, list[tuple[int, int]]]]:
    """The nodes made since ``first_node`` that consume ``inputs``, each with its (edge, input index) pairs.

    A module's own gradient for an input is what these edges carry, summed,
    which is what a full backward hook reports; a hook on the input tensor
    would see its whole gradient, residual paths included. The search walks
    back from the outputs and stays among the nodes the call made (sequence
    numbers from ``first_node`` up), so it never wanders into the rest of
    the graph. ``before``: the inputs' :func:`anchors` taken before the call.
    """
    by_node: dict[tuple[int, int], int] = {}
    leaves: dict[int, int] = {}
    alive: list[Any] = []  # keeps the ids below meaningful
    for index, (requires_grad, node, output_nr) in enumerate(before if before is not None else anchors(inputs)):
        if not requires_grad:
            continue
        tensor = inputs[index]
        if node is None:
            leaves[id(tensor)] = index
        else:
            alive.append(node)
            by_node[(id(node), output_nr)] = index
    if not by_node and not leaves:
        return []
    bounded, last_node = _NEXT_SEQUENCE_NR is not None, next_node_number()
    stack = [t.grad_fn for t in outputs if t is not None and t.grad_fn is not None]
    seen: set[int] = set()
    uses = []
    while stack:
        node = stack.pop()
        if id(node) in seen or (bounded and not first_node <= node._sequence_nr() < last_node):
            continue
        seen.add(id(node))
        alive.append(node)
        edges = []
        for edge, (target, output_nr) in enumerate(node.next_functions):
            if target is None:
                continue
            index = by_node.get((id(target), output_nr))
            if index is None and leaves:
                index = leaves.get(id(getattr(target, "variable", None)))
            if index is not None:
                edges.append((edge, index))
            else:
                stack.append(target)
        if edges:
            uses.append((node, edges))
    return uses


def add(first: torch.Tensor, second: torch.Tensor) -> torch.Tensor:
    """Two gradient contributions summed as autograd sums them, with torch's own add, not the dump's wrapper."""
    plain_add = getattr(torch.add, "__msprobe_original__", torch.add)
    return plain_add(first, second)
