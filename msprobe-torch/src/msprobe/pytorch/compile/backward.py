"""The backward of a compiled graph, node by node: each gradient against its float64 replay.

The compiled backward is one function whose intermediate gradients are never returned. To read them, a
zero "probe" input is added to every node's value (``node + probe``): the probe's gradient is the node's.
The graph with probes is run eagerly and compiled, with the same cotangent on its outputs; each node's
gradient is then replayed in float64 from its users' gradients of the same run (the backward of each user,
evaluated on that run's own forward values). The first gradient, in backward order, that departs from its
replay beyond rounding (``msprobe.core.diagnosis.replay``) is where the compiler changed the backward: the
users' backward formulas, as decomposed and lowered, made it.
"""

from __future__ import annotations

import logging
import operator
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import torch
import torch.fx

from msprobe.core.diagnosis.replay import ReplayedValue
from msprobe.pytorch.compile.replay import module_of, op_name, relative, upcast

logger = logging.getLogger(__name__)


@dataclass
class GradientCheck:
    """The gradient of one node (or input) and the users whose backward made it."""

    node: str
    users: list[str]
    value: ReplayedValue


def _probed(graph_module: torch.fx.GraphModule, names: set[str]) -> torch.fx.GraphModule:
    """A copy of the graph with ``node + probe_node`` in place of each named node wherever it is used."""
    probed = torch.fx.GraphModule(graph_module, graph_module.graph.__deepcopy__())
    graph = probed.graph
    last = [node for node in graph.nodes if node.op == "placeholder"][-1]
    for node in [node for node in graph.nodes if node.name in names]:
        with graph.inserting_after(last):
            last = graph.placeholder(f"probe_{node.name}")
        users = list(node.users)
        with graph.inserting_after(node):
            added = graph.call_function(operator.add, (node, last))
        for user in users:
            user.replace_input_with(node, added)
    probed.recompile()
    return probed


def _fresh(inputs: Sequence[Any]) -> list[Any]:
    return [
        value.detach().clone().requires_grad_(value.requires_grad)
        if isinstance(value, torch.Tensor) and value.is_floating_point() else value
        for value in inputs
    ]  # fmt: skip


def _outputs(values: Any) -> list[Any]:
    return list(values) if isinstance(values, (list, tuple)) else [values]


def gradients(
    function: Callable[..., Any], inputs: Sequence[Any], probes: dict[str, torch.Tensor], cotangents: list[Any]
) -> tuple[dict[str, torch.Tensor], dict[int, torch.Tensor]]:
    """The probes' gradients (one per node) and the inputs' own, ``function`` run once forward and backward."""
    leaves = _fresh(inputs)
    shadows = {name: probe.clone().requires_grad_(True) for name, probe in probes.items()}
    with torch.enable_grad():
        outputs = _outputs(function(*leaves, *shadows.values()))
        loss = sum((out * cot).sum() for out, cot in zip(outputs, cotangents) if cot is not None)
        loss.backward()
    grads = {
        name: (probe.grad if probe.grad is not None else torch.zeros_like(probe)) for name, probe in shadows.items()
    }
    own = {i: leaf.grad for i, leaf in enumerate(leaves) if isinstance(leaf, torch.Tensor) and leaf.grad is not None}
    return grads, own


def replay_gradient(
    node: torch.fx.Node, forward: dict[str, Any], grads: dict[str, torch.Tensor], output_grads: dict[str, Any]
) -> torch.Tensor | None:
    """``node``'s gradient in float64: the sum of its users' backward, each fed its own gradient from ``grads``
    and the forward values ``forward``; None where a user's gradient is not known."""
    total = None
    for user in node.users:
        if user.op == "output":
            grad = output_grads.get(node.name)
            if grad is None:
                return None
            total = upcast(grad) if total is None else total + upcast(grad)
            continue
        if user.name not in grads:
            return None
        leaf = upcast(forward[node.name]).requires_grad_(True)

        given = leaf.clone()  # not the leaf itself: an in-place user (relu_) may write into what it is given

        def value(arg: torch.fx.Node, given: torch.Tensor = given) -> Any:
            return given if arg.name == node.name else upcast(forward[arg.name])

        args = torch.fx.node.map_arg(user.args, value)
        kwargs = torch.fx.node.map_arg(user.kwargs, value)
        with torch.enable_grad():
            out = (
                getattr(args[0], user.target)(*args[1:], **kwargs)
                if user.op == "call_method"
                else user.target(*args, **kwargs)
            )
            if not (isinstance(out, torch.Tensor) and out.requires_grad):
                continue  # no gradient flows back through it
            (part,) = torch.autograd.grad(out, leaf, upcast(grads[user.name]), allow_unused=True)
        if part is not None:
            total = part if total is None else total + part
    return total


def backward_checks(
    graph_module: torch.fx.GraphModule,
    inputs: Sequence[Any],
    eager: dict[str, Any],
    compiler: Callable[..., Any],
    checked: Sequence[torch.fx.Node],
    compiled_forward: dict[str, Any] | None = None,
) -> list[GradientCheck]:
    """Every node's gradient, eager and compiled, against its float64 replay; in backward order. Each run's
    gradients are replayed on that run's own forward values (``compiled_forward``: the compiled run's, where
    known), so a change the compiler made in the forward alone makes no backward value depart."""
    names = [node.name for node in checked]  # in graph order, as the probes' placeholders are
    probed = _probed(graph_module, set(names))
    probes = {name: torch.zeros_like(eager[name]) for name in names}
    outputs = _outputs(eager[next(node for node in graph_module.graph.nodes if node.op == "output").name])
    generator = torch.Generator().manual_seed(0)
    cotangents = [
        torch.randn(out.shape, generator=generator, dtype=out.dtype).to(out.device)
        if isinstance(out, torch.Tensor) and out.is_floating_point() else None
        for out in outputs
    ]  # fmt: skip
    runs = {"eager": gradients(probed, inputs, probes, cotangents)}
    # compiled for inputs that require grad as the runs' do: AOT autograd decides at compile time what it differentiates
    compiled = compiler(probed, [*_fresh(inputs), *(probe.clone().requires_grad_(True) for probe in probes.values())])
    runs["compiled"] = gradients(compiled, inputs, probes, cotangents)

    output_node = next(node for node in graph_module.graph.nodes if node.op == "output")
    returned = _outputs(output_node.args[0])
    output_grads = {arg.name: cot for arg, cot in zip(returned, cotangents) if isinstance(arg, torch.fx.Node)}
    placeholders = [node for node in graph_module.graph.nodes if node.op == "placeholder"]
    forward = {"eager": eager, "compiled": {**eager, **(compiled_forward or {})}}
    found = []
    for node in reversed(list(graph_module.graph.nodes)):
        users = [user for user in node.users if user.op != "output"]
        if not users:
            continue
        if node.name in names:
            got = {run: grads[node.name] for run, (grads, _) in runs.items()}
        elif node in placeholders and placeholders.index(node) in runs["eager"][1]:
            index = placeholders.index(node)
            got = {run: own.get(index) for run, (_, own) in runs.items()}
        else:
            continue
        try:
            replays = {
                run: replay_gradient(node, forward[run], grads, output_grads) for run, (grads, _) in runs.items()
            }
        except Exception as exc:  # a user whose backward cannot be replayed in float64: its input goes unjudged
            logger.debug("the gradient of %s is not replayed: %s: %s", node.name, type(exc).__name__, exc)
            continue
        if any(value is None for value in (*got.values(), *replays.values())):
            continue
        dtype = eager[node.name].dtype
        words = ", ".join(op_name(user) for user in users)
        value = ReplayedValue(
            ", ".join(user.name for user in users),
            f"{words} backward, the gradient of {node.name}",
            torch.finfo(dtype).eps,
            relative(got["eager"], replays["eager"]),
            relative(got["compiled"], replays["compiled"]),
            module_of(users[0]),
            phase="backward",
        )
        found.append(GradientCheck(node.name, [user.name for user in users], value))
    return found
