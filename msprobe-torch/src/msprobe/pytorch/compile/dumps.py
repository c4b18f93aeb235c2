"""A compile check as two dump folders, the eager run's and the compiled run's, and what msprobe makes of them.

Each checked FX node is an entry (``Fx.{node}.0.forward``) holding the statistics of what it was given and
what it made, in each run; Inductor's kernels are the modules of ``construct.json`` (``Module.{kernel}.Kernel``),
so the graph page shows each kernel as a group of the nodes it fused. The compare table is msprobe's own
(statistics mode), and the graph page carries the check's answer.
"""

from __future__ import annotations

import json
import re
from dataclasses import replace
from pathlib import Path
from typing import Any

import torch
import torch.fx

from msprobe.core.dump.values import ValueEncoder
from msprobe.core.files import make_dir, write_new_text
from msprobe.pytorch.dump import measuring
from msprobe.pytorch.dump.tensors import describe_object


def entry_name(node: str) -> str:
    return f"Fx.{node}.0.forward"


def kernel_module(kernel: str) -> str:
    return f"Module.{re.sub(r'[^A-Za-z0-9_]', '_', kernel)}.Kernel.forward.0"


def _summary(tensor: torch.Tensor, _suffix: str) -> dict[str, Any]:
    data = tensor.detach()
    summary: dict[str, Any] = {"type": "torch.Tensor", "dtype": str(data.dtype), "shape": list(data.shape)}
    if data.numel() and not data.is_meta:
        summary.update(measuring.measure(data))
    summary["requires_grad"] = False
    return summary


def write_run(folder: Path, nodes: list[torch.fx.Node], values: dict[str, Any], kernel_of: dict[str, str]) -> Path:
    """One run's dump folder: every node's inputs and output from ``values``, each under its kernel."""
    encoder = ValueEncoder(torch.Tensor, _summary, describe_object)
    data, construct = {}, {}
    for node in nodes:
        name = entry_name(node.name)
        args = torch.fx.node.map_arg(node.args, lambda arg: values.get(arg.name))
        kwargs = torch.fx.node.map_arg(node.kwargs, lambda arg: values.get(arg.name))
        encoded_args, encoded_kwargs = encoder.encode_args(tuple(args), dict(kwargs), name)
        data[name] = {
            "input_args": encoded_args,
            "input_kwargs": encoded_kwargs,
            "output": encoder.encode_outputs(values[node.name], f"{name}.output"),
        }
        kernel = kernel_of.get(node.name)
        construct[name] = kernel_module(kernel) if kernel else None
    make_dir(folder)
    header = {"task": "statistics", "level": "fx", "framework": "pytorch", "dump_data_dir": None}
    write_new_text(folder / "dump.json", json.dumps({**header, "data": data}, indent=1))
    write_new_text(folder / "construct.json", json.dumps(construct, indent=1))
    write_new_text(folder / "stack.json", "{}")
    return folder


def write_report(
    output: Path,
    backend: str,
    nodes: list[torch.fx.Node],
    eager: dict[str, Any],
    compiled: dict[str, Any],
    kernel_of: dict[str, str],
    diagnosis: Any,
) -> list[Path]:
    """Both runs' dump folders, msprobe's compare table of them, and the graph page with the check's answer."""
    from msprobe.core.compare.run import compare_pair
    from msprobe.core.graph.run import write_answered_page

    base = output / f"compile_check_{backend}"
    for folder in (base, base / "eager", base / "compiled"):  # nothing written through a link planted below
        make_dir(folder, root=output)
    eager_folder = write_run(base / "eager", nodes, eager, kernel_of)
    compiled_folder = write_run(base / "compiled", nodes, {**eager, **compiled}, kernel_of)
    summary, _ = compare_pair(
        compiled_folder / "dump.json", eager_folder / "dump.json", base, auto_analyze=False, stamp=backend
    )
    marked = diagnosis
    if diagnosis.verdict == "divergence":  # a node of the forward is marked; a gradient or kernel has no entry
        node = diagnosis.api if diagnosis.phase == "forward" and ":" not in (diagnosis.api or ":") else None
        marked = replace(diagnosis, api=entry_name(node) if node else None)
    page = write_answered_page(
        compiled_folder, eager_folder, base / "graph.html", f"msprobe compile_check: {backend} against eager", marked
    )
    return [*summary.files, page]
