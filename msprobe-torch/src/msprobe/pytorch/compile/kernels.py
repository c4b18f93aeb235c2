"""Inductor's generated kernels, the FX nodes each one fused, and each kernel replayed alone.

The mapping is Inductor's own provenance record (``trace.provenance_tracking_level``): kernel to the
post-grad nodes it computes, post-grad node to the Dynamo node it came from. Inductor publishes it through
its structured trace log, which is read here for the length of one compile; the kernels' sources are read
through ``GraphLowering.save_output_code``, the hook ``torch._inductor.utils.run_and_get_code`` uses.

A kernel is replayed alone by compiling the Dynamo nodes it fused, and only those, with the same backend,
and running them on the inputs the eager run gave them: each of its outputs is then judged against its
float64 replay as a node is (``msprobe.core.diagnosis.replay``).
"""

from __future__ import annotations

import json
import logging
import operator
import re
from collections.abc import Callable, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any
from unittest import mock

import torch
import torch.fx

from msprobe.pytorch.compile.replay import relative, replay64

logger = logging.getLogger(__name__)

_KERNEL_SOURCE = re.compile(r"^(\w+) = async_compile\.\w+\((.*?)'''(.*?)'''", re.MULTILINE | re.DOTALL)


@dataclass
class Kernel:
    """One call of the compiled graph: a generated (fused) kernel, or an extern one (``extern_kernels.mm``)."""

    name: str  # unique in the graph: an extern kernel called twice is ``extern_kernels.mm#3`` and ``#5``
    nodes: list[str]  # the Dynamo nodes it computes (part of), in graph order
    source: str = ""  # the generated code; empty for an extern kernel

    @property
    def extern(self) -> bool:
        return self.name.startswith("extern_kernels.")


@dataclass
class KernelCheck:
    """A kernel replayed alone: one entry per floating output, (node, eager error, kernel error)."""

    kernel: Kernel
    outputs: list[tuple[str, float, float]] = field(default_factory=list)
    error: str = ""  # why it could not be replayed alone, when it could not


class _ProvenanceLog(logging.Handler):
    """Keeps the provenance artifacts Inductor writes to its structured trace log."""

    def __init__(self) -> None:
        super().__init__(logging.DEBUG)
        self.artifacts: dict[str, str] = {}

    def emit(self, record: logging.LogRecord) -> None:
        metadata = getattr(record, "metadata", None)
        artifact = metadata.get("artifact") if isinstance(metadata, dict) else None
        if isinstance(artifact, dict) and str(artifact.get("name", "")).startswith("inductor_provenance"):
            self.artifacts[artifact["name"]] = getattr(record, "payload", "") or ""


@contextmanager
def _recording() -> Any:
    """Inductor's provenance and generated code, for the compiles made inside (caches off, so code is made)."""
    import torch._inductor.config as inductor_config
    from torch._inductor.graph import GraphLowering
    from torch._logging._internal import trace_log

    handler, sources = _ProvenanceLog(), []
    trace_log.addHandler(handler)
    try:
        with (
            inductor_config.patch({"trace.provenance_tracking_level": 1, "force_disable_caches": True}),
            mock.patch.object(GraphLowering, "save_output_code", staticmethod(sources.append)),
        ):
            yield handler.artifacts, sources
    finally:
        trace_log.removeHandler(handler)


def kernels_of(artifacts: dict[str, str], sources: Sequence[str], graph: torch.fx.Graph) -> list[Kernel]:
    """The kernels of one compile, in the order the compiled graph calls them, each with its Dynamo nodes."""
    try:
        mapping = json.loads(artifacts.get("inductor_provenance_tracking_node_mappings") or "{}")
    except ValueError:
        mapping = {}
    to_post = mapping.get("cppCodeToPost") or {}
    post_to_pre = mapping.get("postToPre") or {}
    order = {node.name: index for index, node in enumerate(graph.nodes)}
    code = {name: text for source in sources for name, _, text in _KERNEL_SOURCE.findall(source)}
    calls = []
    for key, post_nodes in to_post.items():
        name, _, handle = str(key).rpartition(":")
        if not name or not handle.isdigit():
            name, handle = str(key), "0"
        nodes = {pre for post in post_nodes for pre in post_to_pre.get(post, []) if pre in order}
        if nodes:
            calls.append((int(handle), name, sorted(nodes, key=order.__getitem__)))
    calls.sort()
    return [
        Kernel(f"{name}#{handle}" if name.startswith("extern_kernels.") else name, nodes, code.get(name, ""))
        for handle, name, nodes in calls
    ]


def inductor_kernels(
    graph_module: torch.fx.GraphModule, inputs: Sequence[Any], compiler: Callable[..., Any]
) -> list[Kernel]:
    """Compile ``graph_module`` as it is (no node made an output) and read which kernels compute which nodes."""
    with _recording() as (artifacts, sources):
        with torch.no_grad():
            compiler(graph_module, list(inputs))(*inputs)
    kernels = kernels_of(artifacts, sources, graph_module.graph)
    if not kernels:
        logger.warning("Inductor recorded no kernel provenance for this graph; kernels are not named")
    return kernels


def kernel_graph(graph_module: torch.fx.GraphModule, nodes: Sequence[str]) -> tuple[torch.fx.GraphModule, list, list]:
    """The Dynamo nodes of one kernel as a graph of their own: its placeholders stand for what the kernel reads,
    its outputs are the nodes whose values leave the kernel. Returns it, the names read and the names output."""
    inside = set(nodes)
    for node in graph_module.graph.nodes:  # a tuple a kernel makes is read through getitem: taken in with it
        if node.name in inside:
            inside.update(user.name for user in node.users if user.target is operator.getitem)
    kept = [node for node in graph_module.graph.nodes if node.name in inside]
    reads: list[str] = []
    for node in kept:
        for arg in node.all_input_nodes:
            if arg.name not in inside and arg.name not in reads:
                reads.append(arg.name)
    graph = torch.fx.Graph()
    env = {name: graph.placeholder(f"in_{name}") for name in reads}
    outputs = []
    for node in kept:
        env[node.name] = graph.node_copy(node, lambda arg: env[arg.name])
        if any(user.name not in inside for user in node.users) and isinstance(
            node.meta.get("example_value"), torch.Tensor
        ):
            outputs.append(node.name)
    graph.output(tuple(env[name] for name in outputs))
    return torch.fx.GraphModule(graph_module, graph), reads, outputs


def replay_kernel(
    kernel: Kernel, graph_module: torch.fx.GraphModule, eager: dict[str, Any], compiler: Callable[..., Any]
) -> KernelCheck:
    """``kernel``'s nodes compiled alone and run on what the eager run gave them, each output against the
    float64 replay of the same nodes from the same inputs."""
    check = KernelCheck(kernel)
    try:
        alone, reads, outputs = kernel_graph(graph_module, kernel.nodes)
        inputs = [eager[name] for name in reads]
        with torch.no_grad():
            values = compiler(alone, list(inputs))(*inputs)
    except Exception as exc:  # a kernel that will not compile alone is reported, the rest still checked
        check.error = f"{type(exc).__name__}: {str(exc).strip().splitlines()[0] if str(exc).strip() else ''}"
        logger.warning("kernel %s could not be replayed alone: %s", kernel.name, check.error)
        return check
    wide = dict(eager)
    by_name = {node.name: node for node in graph_module.graph.nodes}
    for name in kernel.nodes:
        wide[name] = replay64(by_name[name], wide)  # the kernel's nodes chained in float64
    for name, value in zip(outputs, values):
        if isinstance(value, torch.Tensor) and value.is_floating_point():
            check.outputs.append((name, relative(eager[name], wide[name]), relative(value, wide[name])))
    return check
