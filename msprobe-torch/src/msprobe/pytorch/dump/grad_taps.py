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


def outputs_used_inside(outputs: list[torch.Tensor | None], first_node: int) -> set[int]:
    """Indices of the outputs that the call itself also consumed (attention weights that a HuggingFace
    attention module returns after multiplying them with the values).

    The gradient of such an output has two parts, the call's own use and what comes back from outside;
    the reference's module hooks report only the second. Found by walking the call's own nodes (sequence
    numbers from ``first_node`` up) back from the outputs, looking for edges that point at an output.
    """
    stack = [t.grad_fn for t in outputs if t is not None and t.grad_fn is not None]
    alive = list(stack)  # keeps the ids below meaningful
    targets = {
        (id(t.grad_fn), t.output_nr): index
        for index, t in enumerate(outputs)
        if t is not None and t.grad_fn is not None
    }
    if len(targets) < 2 or _NEXT_SEQUENCE_NR is None:
        # an inner use found from the outputs feeds another output: one output cannot have one (and without
        # sequence numbers the call's nodes cannot be told from the rest of the graph)
        return set()
    last_node = next_node_number()
    seen: set[int] = set()
    used: set[int] = set()
    while stack:
        node = stack.pop()
        if id(node) in seen or not first_node <= node._sequence_nr() < last_node:
            continue
        seen.add(id(node))
        for target, output_nr in node.next_functions:
            if target is None:
                continue
            index = targets.get((id(target), output_nr))
            if index is not None:
                used.add(index)
            stack.append(target)
            alive.append(target)
    return used


class _OutputTap(torch.autograd.Function):
    """The identity, applied to a module's outputs as torch's full backward hooks apply it: uses of the
    outputs after the module returned go through this node, so its gradients are what comes from outside."""

    @staticmethod
    def forward(ctx: Any, *tensors: torch.Tensor) -> tuple[torch.Tensor, ...]:
        ctx.set_materialize_grads(False)
        return tensors

    @staticmethod
    def backward(ctx: Any, *grads: torch.Tensor | None) -> tuple[torch.Tensor | None, ...]:
        return grads


def needs_tap(outputs: list[torch.Tensor | None], first_node: int) -> bool:
    """Whether hooks on the outputs themselves would report what the reference does not: an output the call
    also used itself (see :func:`outputs_used_inside`), or an output that is a view, whose node a later
    in-place update (``h += x``) takes out of the graph with its hook."""
    if any(t is not None and t.requires_grad and t._is_view() for t in outputs):
        return True
    return bool(outputs_used_inside(outputs, first_node))


def tap_outputs(output: Any, outputs: list[torch.Tensor | None]) -> tuple[Any, Any, list[int]]:
    """``output`` with its tensors that need a gradient passed through one :class:`_OutputTap` node and
    cloned, as the reference's module hooks pass them: the new output, the node (to hook), and for each of
    the node's gradients the output index it belongs to. The clones are what the caller gets: not views, so
    it may update them in place, and what it does with them reaches the node alone."""
    indices = [i for i, t in enumerate(outputs) if t is not None and t.requires_grad]
    tapped = _OutputTap.apply(*(outputs[i] for i in indices))
    plain_clone = getattr(torch.Tensor.clone, "__msprobe_original__", torch.Tensor.clone)
    replaced = {index: plain_clone(t) for index, t in zip(indices, tapped)}
    if isinstance(output, torch.Tensor):
        new_output: Any = replaced[0]
    else:
        items = [replaced.get(i, item) for i, item in enumerate(output)]
        new_output = type(output)(items) if not hasattr(output, "_fields") else type(output)(*items)
    return new_output, tapped[0].grad_fn, indices


_WATCHERS = "_msprobe_gradient_watchers"


_watch_count = 0  # watchers registered so far: a call's watchers come between its start and its end


def watch_number() -> int:
    """The number the next watcher gets: taken when a call starts, it tells its inner calls' watchers."""
    return _watch_count


def on_gradient(tensor: torch.Tensor, watcher: Any) -> None:
    """Call ``watcher(grad)`` when the gradient of ``tensor`` arrives; the last watcher added runs first.

    Calls that return the same tensor (a module and its last submodule, a module and the p=0 dropout after
    it) see its gradient in the order the reference's per-call nodes run: the call that returned it last,
    the outermost, first. One tensor hook per tensor calls them all, in that order.

    A watcher may return ``(finish, since)``: ``finish`` runs once the watchers numbered ``since`` or later
    (the calls inside it) have run, before the others. A call that hands its input back closes so, as the
    reference's node for its input runs after those of the calls inside it.
    """
    global _watch_count
    number, _watch_count = _watch_count, _watch_count + 1
    # a hook belongs to the node the tensor hangs from now: after an in-place call the same object needs another
    node, watched = tensor.grad_fn, getattr(tensor, _WATCHERS, None)
    watchers = watched[1] if watched is not None and watched[0] is node else None
    if watchers is None:
        watchers = []
        try:
            setattr(tensor, _WATCHERS, (node, watchers))
        except (AttributeError, TypeError, RuntimeError):  # a tensor that takes no attributes: a hook of its own
            pass
        tensor.register_hook(_dispatcher(watchers))
    watchers.append((number, watcher))


def _dispatcher(watchers: list[tuple[int, Any]]) -> Any:
    def dispatch(grad: torch.Tensor) -> None:
        waiting: list[tuple[Any, int]] = []  # (finish, since), innermost last
        for number, call in reversed(watchers):
            while waiting and number < waiting[-1][1]:
                waiting.pop()[0]()
            later = call(grad)
            if later is not None:
                waiting.append(later)
        while waiting:
            waiting.pop()[0]()

    return dispatch


def add(first: torch.Tensor, second: torch.Tensor) -> torch.Tensor:
    """Two gradient contributions summed as autograd sums them, with torch's own add, not the dump's wrapper."""
    plain_add = getattr(torch.add, "__msprobe_original__", torch.add)
    return plain_add(first, second)


def zeros(shape: torch.Size, dtype: torch.dtype, device: torch.device) -> torch.Tensor:
    """Zeros made by torch's own function, not the dump's wrapper (this runs inside a backward hook)."""
    plain_zeros = getattr(torch.zeros, "__msprobe_original__", torch.zeros)
    return plain_zeros(shape, dtype=dtype, device=device)
