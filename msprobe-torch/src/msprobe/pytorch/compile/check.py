"""Which FX node the compiler changed: a torch.compile graph run eagerly and compiled, node by node.

Dynamo's graph of the model is run twice: eagerly, node by node, and
compiled by the backend (``inductor`` or ``aot_eager``) with every node's
value made an output of the graph, so that each one is materialised and
can be read. Each node is then replayed alone in float64, on the inputs
each run gave it, and judged by ``msprobe.core.diagnosis.replay``: the
first node the compiled run computed worse than rounding explains is where
the compiler changed the numbers (a decomposition, a lowering, a kernel),
whatever its error then does downstream. For Inductor, the generated
kernels are mapped to the nodes they compute and replayed alone
(``compile_kernels``); where an input or a parameter requires grad, the
backward is judged gradient by gradient (``compile_backward``).

Making every node an output changes what Inductor fuses; a fault of one
op's decomposition or lowering shows all the same, and the kernel replay
compiles each kernel's nodes as they were fused.
"""

from __future__ import annotations

import logging
import operator
import sys
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch
import torch.fx

from msprobe.core.diagnosis import Diagnosis
from msprobe.core.diagnosis.replay import ReplayedValue, departs, diagnose_replayed
from msprobe.core.jobs import note
from msprobe.pytorch.compile.backward import GradientCheck, backward_checks
from msprobe.pytorch.compile.kernels import Kernel, KernelCheck, inductor_kernels, replay_kernel
from msprobe.pytorch.compile.replay import module_of, op_name, relative, replay64

logger = logging.getLogger(__name__)

BACKENDS = ("inductor", "aot_eager")
_EPS32 = torch.finfo(torch.float32).eps

COLUMNS = ["Node", "Phase", "Op", "Module", "Kernel", "Dtype", "Shape", "Eager Error", "Compiled Error", "Difference",
           "Result"]  # fmt: skip


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
    kernel: str = ""  # Inductor's kernels that compute it, in the graph compiled as it is
    eps: float = _EPS32  # its dtype's machine epsilon

    def replayed(self) -> ReplayedValue:
        return ReplayedValue(self.node, self.op, self.eps, self.eager_error, self.compiled_error, self.module,
                             kernel=self.kernel)  # fmt: skip


@dataclass
class CompileCheck:
    backend: str
    nodes: list[NodeCheck] = field(default_factory=list)
    kernels: list[KernelCheck] = field(default_factory=list)  # Inductor's, each replayed alone
    gradients: list[GradientCheck] = field(default_factory=list)  # in backward order; none without a backward
    files: list[Path] = field(default_factory=list)  # the report's, when one was asked for
    backward_error: str = ""  # why the backward was not checked, where it could not be

    @property
    def first(self) -> NodeCheck | None:
        return next((node for node in self.nodes if node.departs), None)

    def kernel_values(self) -> list[ReplayedValue]:
        eps = {node.node: node.eps for node in self.nodes}
        modules = {node.node: node.module for node in self.nodes}
        return [
            ReplayedValue(f"{check.kernel.name}:{name}", "kernel", eps.get(name, _EPS32), eager, compiled,
                          modules.get(name, ""), kernel=check.kernel.name)
            for check in self.kernels
            for name, eager, compiled in check.outputs
        ]  # fmt: skip

    def first_kernel(self) -> ReplayedValue | None:
        return next((value for value in self.kernel_values() if value.departs), None)

    def diagnosis(self) -> Diagnosis:
        """The core diagnosis's answer: the first node the compiled graph computed beyond rounding, else the first
        kernel output that departs when the kernel is replayed alone (a change only its fusion makes)."""
        found = diagnose_replayed([node.replayed() for node in self.nodes], f"{self.backend} graph")
        if found.verdict == "none" and self.kernels:
            by_kernel = diagnose_replayed(self.kernel_values(), f"{self.backend} kernels replayed alone")
            if by_kernel.verdict != "none":
                return by_kernel
            found.detail += f"; nor does any of its {len(self.kernels)} kernels replayed alone"
        if found.verdict == "none" and self.gradients:
            backward = diagnose_replayed([check.value for check in self.gradients], f"{self.backend} backward")
            if backward.verdict != "none":
                return backward
            found.detail += f"; nor does any of the {len(self.gradients)} gradients of its backward"
        return found

    def line(self) -> str:
        line = f"{self.backend}: {self.diagnosis().line()}"
        if self.backward_error:
            line += f" (backward not checked: {self.backward_error})"
        first, kernel = self.first, self.first_kernel()
        if first is not None and kernel is not None and kernel.kernel in first.kernel.split(", "):
            line += f"; replayed alone, kernel {kernel.name} departs too ({kernel.compiled_error:.3g})"
        return line


def load_script(path: Path) -> tuple[Any, tuple]:
    """``model_and_inputs()`` of the user's script: the model and a tuple of its example inputs."""
    return model_and_inputs(load_script_module(path), path)


def load_script_module(path: Path) -> Any:
    """The user's script, run as a module (for what else it defines beside ``model_and_inputs()``)."""
    import importlib.util

    from msprobe.core.errors import UsageError

    spec = importlib.util.spec_from_file_location("msprobe_compile_check_script", path)
    if spec is None or spec.loader is None:
        raise UsageError(f"{path}: not a Python file")
    module = importlib.util.module_from_spec(spec)
    # run as python would run it: its own folder first on the import path, so modules beside it import
    folder = str(Path(path).resolve().parent)
    if folder not in sys.path:
        sys.path.insert(0, folder)
    try:
        spec.loader.exec_module(module)
    except SystemExit as exc:  # sys.exit() at import: no model to check, and never msprobe's own exit code
        raise UsageError(f"{path}: the script called sys.exit({exc.code!r}) while it was loaded") from None
    except Exception as exc:  # the script's own error, said as such: not msprobe's
        raise UsageError(f"{path}: the script raised {type(exc).__name__}: {exc}") from None
    return module


def model_and_inputs(module: Any, path: Path) -> tuple[Any, tuple]:
    """What the loaded script's ``model_and_inputs()`` returns: the model and a tuple of its example inputs."""
    from msprobe.core.errors import UsageError

    make = getattr(module, "model_and_inputs", None)
    if not callable(make):
        raise UsageError(f"{path}: defines no model_and_inputs() returning (model, inputs)")
    try:
        made = make()
    except SystemExit as exc:
        raise UsageError(f"{path}: model_and_inputs() called sys.exit({exc.code!r})") from None
    except Exception as exc:
        raise UsageError(f"{path}: model_and_inputs() raised {type(exc).__name__}: {exc}") from None
    if not (isinstance(made, tuple) and len(made) == 2):
        raise UsageError(f"{path}: model_and_inputs() must return (model, inputs), got {type(made).__name__}")
    model, inputs = made
    return model, tuple(inputs) if isinstance(inputs, (list, tuple)) else (inputs,)


def write_table(check: CompileCheck, folder: Path) -> Path:
    """One row per checked node, as CSV, written whole or not at all."""
    from msprobe.core.files import make_dir
    from msprobe.core.generation.responses import write_rows

    make_dir(folder)
    rows = [
        [n.node, "forward", n.op, n.module, n.kernel, n.dtype, str(n.shape), n.eager_error, n.compiled_error,
         n.difference, "departs" if n.departs else "pass"]
        for n in check.nodes
    ]  # fmt: skip
    values = [*check.kernel_values(), *(gradient.value for gradient in check.gradients)]
    rows += [
        [v.name, v.phase, v.op, v.module, v.kernel, "", "", v.eager_error, v.compiled_error, "",
         "departs" if v.departs else "pass"]
        for v in values
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
    compiled = compiler_for(backend, decompositions)(exposed, list(inputs))
    with torch.no_grad():
        values = compiled(*inputs)
    return {node.name: value for node, value in zip(nodes, list(values)[len(original) :])}


def compiled_output(
    model: Callable[..., Any], inputs: Sequence[Any], backend: str, decompositions: dict | None = None
) -> Any:
    """The graph's first output, compiled as the backend compiles it (with ``decompositions`` added)."""
    graph_module, example_inputs = capture(model, inputs)
    with torch.no_grad():
        outputs = compiler_for(backend, decompositions)(graph_module, example_inputs)(*example_inputs)
    return outputs[0] if isinstance(outputs, (list, tuple)) else outputs


def compiler_for(backend: str, decompositions: dict | None) -> Callable[..., Any]:
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


def check_compiled(
    model: Callable[..., Any],
    inputs: Sequence[Any],
    backend: str = "inductor",
    decompositions: dict | None = None,
    with_kernels: bool = True,
    forward_only: bool = False,
    report_to: Path | None = None,
) -> CompileCheck:
    """Run ``model(*inputs)`` eagerly and compiled, and find the first FX node the compiler changed; for Inductor,
    also which kernels compute each node, and each kernel replayed alone (``with_kernels``). The backward is
    checked too where any input of the graph (an example input or a parameter) requires grad.
    ``decompositions``: extra decompositions for the backend (the tests inject wrong ones this way).
    ``report_to``: a folder for both runs' dumps, msprobe's compare table of them and the graph page."""
    if backend not in BACKENDS:
        raise ValueError(f"backend must be one of {', '.join(BACKENDS)}, not {backend!r}")
    note("capturing the graph")
    graph_module, example_inputs = capture(model, inputs)
    note(f"running its {len(graph_module.graph.nodes)} nodes eagerly")
    eager = eager_values(graph_module, example_inputs)
    note(f"compiling with {backend} and running")
    compiled = compiled_values(graph_module, example_inputs, backend, decompositions)
    compiler, checked = compiler_for(backend, decompositions), _checked_nodes(graph_module)
    kernels: list[Kernel] = []
    if backend == "inductor" and with_kernels:
        note("mapping Inductor's kernels to nodes")
        try:
            kernels = inductor_kernels(graph_module, example_inputs, compiler)
        except Exception as exc:  # Inductor's provenance record is internal: without it, nodes are still checked
            logger.warning("Inductor's kernels could not be mapped to nodes: %s: %s", type(exc).__name__, exc)
    # the compiled run's own inputs to each node: its compiled predecessors, or what both runs share
    theirs = {**eager, **compiled}
    check = CompileCheck(backend)
    note(f"replaying {len(checked)} nodes in float64")
    for node in checked:
        if node.name not in compiled or node.target in (operator.getitem,):
            continue
        eager_value, compiled_value = eager[node.name], compiled[node.name]
        eager_error = relative(eager_value, replay64(node, eager))
        compiled_error = relative(compiled_value, replay64(node, theirs))
        eps = torch.finfo(eager_value.dtype).eps
        check.nodes.append(
            NodeCheck(
                node.name,
                op_name(node),
                module_of(node),
                str(eager_value.dtype),
                list(eager_value.shape),
                eager_error,
                compiled_error,
                relative(compiled_value, eager_value),
                departs(eager_error, compiled_error, eps),
                ", ".join(kernel.name for kernel in kernels if node.name in kernel.nodes),
                eps,
            )
        )
    if kernels:
        note(f"replaying {len(kernels)} kernels alone")
    check.kernels = [replay_kernel(k, graph_module, eager, compiler) for k in kernels]
    if not forward_only and any(isinstance(value, torch.Tensor) and value.requires_grad for value in example_inputs):
        probed = [node for node in checked if node.target is not operator.getitem]
        note(f"checking the backward: {len(probed)} gradients")
        try:
            check.gradients = backward_checks(graph_module, example_inputs, eager, compiler, probed, theirs)
        except Exception as exc:  # the forward's answer stands; the backward is said to be unchecked
            check.backward_error = f"{type(exc).__name__}: {(str(exc).strip().splitlines() or [''])[0]}"
            logger.warning("%s: the backward could not be checked: %s", backend, check.backward_error)
    if report_to is not None:
        from msprobe.pytorch.compile.dumps import write_report

        note("writing both runs' dumps, their compare and the page")
        reported = [node for node in checked if node.name in compiled]
        kernel_of = {node: kernel.name for kernel in reversed(kernels) for node in kernel.nodes}  # the first wins
        check.files = write_report(report_to, backend, reported, eager, compiled, kernel_of, check.diagnosis())
    return check
