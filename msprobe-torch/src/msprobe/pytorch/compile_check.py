"""Which FX node the compiler changed: a torch.compile graph run eagerly and compiled, node by node.

Dynamo's graph of the model is run twice: eagerly, node by node, and
compiled by the backend (``inductor`` or ``aot_eager``) with every node's
value made an output of the graph, so that each one is materialised and
can be read. Each node is then replayed alone in float64, on the inputs
each run gave it: a node departs when the compiled value is further from
its float64 replay than the eager value is from its own, by more than
rounding in the node's dtype explains. The first node that departs is
where the compiler changed the numbers (a decomposition, a lowering, a
kernel), whatever its error then does downstream.

Making every node an output changes what Inductor fuses; a fault of one
op's decomposition or lowering shows all the same, a reordering that only
a particular fusion makes may not.
"""

from __future__ import annotations

import logging
import math
import operator
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch
import torch.fx

logger = logging.getLogger(__name__)

BACKENDS = ("inductor", "aot_eager")
ROUNDING_ULPS = 64  # a node's own rounding: up to this many ulps of its largest value
EAGER_FACTOR = 16  # and up to this many times the eager value's own distance from float64


COLUMNS = ["Node", "Op", "Module", "Dtype", "Shape", "Eager Error", "Compiled Error", "Difference", "Result"]


@dataclass
class NodeCheck:
    node: str
    op: str
    module: str  # the innermost module whose forward made it
    dtype: str
    shape: list[int]
    eager_error: float  # largest distance of the eager value from the float64 replay, relative to its largest value
    compiled_error: float  # the same for the compiled value, replayed on the compiled run's own inputs
    difference: float  # largest distance between the compiled and the eager value, relative
    departs: bool


@dataclass
class CompileCheck:
    backend: str
    nodes: list[NodeCheck] = field(default_factory=list)

    @property
    def first(self) -> NodeCheck | None:
        return next((node for node in self.nodes if node.departs), None)

    def line(self) -> str:
        first = self.first
        if first is None:
            return (f"{self.backend}: no node departs from eager beyond rounding ({len(self.nodes)} nodes checked, "
                    "each against its float64 replay)")  # fmt: skip
        where = f", in {first.module}" if first.module else ""
        node = f"node {first.node} ({first.op}, {first.dtype}{where})"
        errors = f"{first.compiled_error:.3g} from its float64 replay against {first.eager_error:.3g} eagerly"
        return f"{self.backend}: the compiled graph departs first at {node}: {errors}"


def _module(node: torch.fx.Node) -> str:
    """The path of the innermost module whose forward made the node (``bert.encoder.layer.1.attention``)."""
    stack = node.meta.get("nn_module_stack") or {}
    if not stack:
        return ""
    path = str(list(stack.values())[-1][0])
    return re.sub(r"^L\['[^']*'\]\.?", "", path)


def load_script(path: Path) -> tuple[Any, tuple]:
    """``model_and_inputs()`` of the user's script: the model and a tuple of its example inputs."""
    import importlib.util

    from msprobe.core.errors import UsageError

    spec = importlib.util.spec_from_file_location("msprobe_compile_check_script", path)
    if spec is None or spec.loader is None:
        raise UsageError(f"{path}: not a Python file")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)  # the user's own script, run as python would run it
    make = getattr(module, "model_and_inputs", None)
    if not callable(make):
        raise UsageError(f"{path}: defines no model_and_inputs() returning (model, inputs)")
    made = make()
    if not (isinstance(made, tuple) and len(made) == 2):
        raise UsageError(f"{path}: model_and_inputs() must return (model, inputs), got {type(made).__name__}")
    model, inputs = made
    return model, tuple(inputs) if isinstance(inputs, (list, tuple)) else (inputs,)


def write_table(check: CompileCheck, folder: Path) -> Path:
    """One row per checked node, as CSV, written whole or not at all."""
    from msprobe.core.dump.writer import make_dir
    from msprobe.core.generation.responses import write_rows

    make_dir(folder)
    rows = [
        [n.node, n.op, n.module, n.dtype, str(n.shape), n.eager_error, n.compiled_error, n.difference,
         "departs" if n.departs else "pass"]
        for n in check.nodes
    ]  # fmt: skip
    return write_rows(folder / f"compile_check_{check.backend}.csv", COLUMNS, rows)


def capture(model: Callable[..., Any], inputs: Sequence[Any]) -> tuple[torch.fx.GraphModule, list[Any]]:
    """Dynamo's graph of ``model(*inputs)`` and the values of its placeholders (one graph: a graph break is
    refused, as the check needs the whole computation)."""
    graphs: list[tuple[torch.fx.GraphModule, list[Any]]] = []

    def keep(graph_module: torch.fx.GraphModule, example_inputs: list[Any]) -> Callable[..., Any]:
        graphs.append((graph_module, list(example_inputs)))
        return graph_module.forward

    from msprobe.core.errors import UsageError

    torch._dynamo.reset()
    try:
        with torch.no_grad():
            torch.compile(model, backend=keep, fullgraph=True)(*inputs)
    except Exception as exc:  # a graph break, or code dynamo cannot trace: said in one line, not a traceback
        reason = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        raise UsageError(f"the model does not compile to one graph, which the check needs: {reason}") from None
    finally:
        torch._dynamo.reset()
    return graphs[0]


def _op_name(node: torch.fx.Node) -> str:
    target = node.target
    return target if isinstance(target, str) else getattr(target, "__name__", str(target))


def eager_values(graph_module: torch.fx.GraphModule, inputs: Sequence[Any]) -> dict[str, Any]:
    """Every node's value, the graph run eagerly."""
    values: dict[str, Any] = {}

    class Recorder(torch.fx.Interpreter):
        def run_node(self, node: torch.fx.Node) -> Any:
            result = super().run_node(node)
            values[node.name] = result
            return result

    with torch.no_grad():
        Recorder(graph_module).run(*inputs)
    return values


def _checked_nodes(graph_module: torch.fx.GraphModule) -> list[torch.fx.Node]:
    """The computing nodes whose value is one floating tensor."""
    checked = []
    for node in graph_module.graph.nodes:
        value = node.meta.get("example_value")
        if node.op in ("call_function", "call_method") and isinstance(value, torch.Tensor):
            if value.is_floating_point():
                checked.append(node)
    return checked


def compiled_values(
    graph_module: torch.fx.GraphModule, inputs: Sequence[Any], backend: str, decompositions: dict | None = None
) -> dict[str, Any]:
    """Every checked node's value, the graph compiled with each of them made an output."""
    exposed = torch.fx.GraphModule(graph_module, graph_module.graph.__deepcopy__())
    nodes = _checked_nodes(exposed)
    output = next(node for node in exposed.graph.nodes if node.op == "output")
    original = output.args[0]
    original = tuple(original) if isinstance(original, (list, tuple)) else (original,)
    with exposed.graph.inserting_before(output):
        exposed.graph.output((*original, *nodes))  # flat: AOT autograd wants a flat tuple of outputs
    exposed.graph.erase_node(output)
    exposed.recompile()
    compiled = _compiler(backend, decompositions)(exposed, list(inputs))
    with torch.no_grad():
        values = compiled(*inputs)
    return {node.name: value for node, value in zip(nodes, list(values)[len(original) :])}


def compiled_output(
    model: Callable[..., Any], inputs: Sequence[Any], backend: str, decompositions: dict | None = None
) -> Any:
    """The graph's first output, compiled as the backend compiles it (with ``decompositions`` added)."""
    graph_module, example_inputs = capture(model, inputs)
    with torch.no_grad():
        outputs = _compiler(backend, decompositions)(graph_module, example_inputs)(*example_inputs)
    return outputs[0] if isinstance(outputs, (list, tuple)) else outputs


def _compiler(backend: str, decompositions: dict | None) -> Callable[..., Any]:
    if backend == "inductor":
        from torch._inductor.compile_fx import compile_fx
        from torch._inductor.decomposition import select_decomp_table

        table = {**select_decomp_table(), **(decompositions or {})} if decompositions else None

        def inductor(graph_module: torch.fx.GraphModule, inputs: list[Any]) -> Callable[..., Any]:
            return compile_fx(graph_module, inputs, decompositions=table)

        return inductor
    if backend == "aot_eager":
        from functorch.compile import make_boxed_func
        from torch._dynamo.backends.common import aot_autograd

        return aot_autograd(fw_compiler=lambda gm, _: make_boxed_func(gm.forward), decompositions=decompositions or {})
    raise ValueError(f"backend must be one of {', '.join(BACKENDS)}, not {backend!r}")


def _upcast(value: Any) -> Any:
    if isinstance(value, torch.Tensor) and value.is_floating_point():
        return value.detach().to(torch.float64)
    if isinstance(value, (list, tuple)):
        return type(value)(_upcast(item) for item in value)
    return value


def replay64(node: torch.fx.Node, values: dict[str, Any]) -> torch.Tensor:
    """The node computed alone in float64 on ``values`` of its inputs."""
    args = torch.fx.node.map_arg(node.args, lambda arg: _upcast(values[arg.name]))
    kwargs = torch.fx.node.map_arg(node.kwargs, lambda arg: _upcast(values[arg.name]))
    with torch.no_grad():
        if node.op == "call_method":
            return getattr(args[0], node.target)(*args[1:], **kwargs)
        return node.target(*args, **kwargs)


def _relative(value: torch.Tensor, reference: torch.Tensor) -> float:
    """The largest distance between two tensors, relative to the reference's largest magnitude."""
    if not reference.numel():
        return 0.0
    reference = reference.detach().to(torch.float64)
    scale = float(reference.abs().max())
    gap = float((value.detach().to(torch.float64) - reference).abs().max())
    if math.isnan(gap):
        return math.inf
    return gap / scale if scale > 0 else gap


def check_compiled(
    model: Callable[..., Any], inputs: Sequence[Any], backend: str = "inductor", decompositions: dict | None = None
) -> CompileCheck:
    """Run ``model(*inputs)`` eagerly and compiled, and find the first FX node the compiler changed.
    ``decompositions``: extra decompositions for the backend (the tests inject wrong ones this way)."""
    if backend not in BACKENDS:
        raise ValueError(f"backend must be one of {', '.join(BACKENDS)}, not {backend!r}")
    graph_module, example_inputs = capture(model, inputs)
    eager = eager_values(graph_module, example_inputs)
    compiled = compiled_values(graph_module, example_inputs, backend, decompositions)
    # the compiled run's own inputs to each node: its compiled predecessors, or what both runs share
    theirs = {**eager, **compiled}
    check = CompileCheck(backend)
    for node in _checked_nodes(graph_module):
        if node.name not in compiled or node.target in (operator.getitem,):
            continue
        eager_value, compiled_value = eager[node.name], compiled[node.name]
        eager_error = _relative(eager_value, replay64(node, eager))
        compiled_error = _relative(compiled_value, replay64(node, theirs))
        eps = torch.finfo(eager_value.dtype).eps
        departs = compiled_error > max(EAGER_FACTOR * eager_error, ROUNDING_ULPS * eps)
        check.nodes.append(
            NodeCheck(
                node.name,
                _op_name(node),
                _module(node),
                str(eager_value.dtype),
                list(eager_value.shape),
                eager_error,
                compiled_error,
                _relative(compiled_value, eager_value),
                departs,
            )
        )
    return check
