"""What every part of the compile check measures with: a node's value replayed in float64, and a distance."""

from __future__ import annotations

import math
import re
from typing import Any

import torch
import torch.fx


def upcast(value: Any) -> Any:
    """Floating tensors (in lists and tuples too) as float64, detached; anything else as it is."""
    if isinstance(value, torch.Tensor) and value.is_floating_point():
        return value.detach().to(torch.float64)
    if isinstance(value, (list, tuple)):
        return type(value)(upcast(item) for item in value)
    return value


def replay64(node: torch.fx.Node, values: dict[str, Any]) -> torch.Tensor:
    """The node computed alone in float64 on ``values`` of its inputs."""
    args = torch.fx.node.map_arg(node.args, lambda arg: upcast(values[arg.name]))
    kwargs = torch.fx.node.map_arg(node.kwargs, lambda arg: upcast(values[arg.name]))
    with torch.no_grad():
        if node.op == "call_method":
            return getattr(args[0], node.target)(*args[1:], **kwargs)
        return node.target(*args, **kwargs)


def relative(value: torch.Tensor, reference: torch.Tensor) -> float:
    """The largest distance between two tensors, relative to the reference's largest magnitude."""
    if not reference.numel():
        return 0.0
    reference = reference.detach().to(torch.float64)
    scale = float(reference.abs().max())
    gap = float((value.detach().to(torch.float64) - reference).abs().max())
    if math.isnan(gap):
        return math.inf
    return gap / scale if scale > 0 else gap


def op_name(node: torch.fx.Node) -> str:
    target = node.target
    return target if isinstance(target, str) else getattr(target, "__name__", str(target))


def module_of(node: torch.fx.Node) -> str:
    """The path of the innermost module whose forward made the node (``bert.encoder.layer.1.attention``)."""
    stack = node.meta.get("nn_module_stack") or {}
    if not stack:
        return ""
    path = str(list(stack.values())[-1][0])
    return re.sub(r"^L\['[^']*'\]\.?", "", path)
