"""Which PyTorch APIs get wrapped: the reference's list (``dump/api_names.yaml``).

What gets a name in dump.json is decided there; the wrapping itself is the
core's :class:`~msprobe.core.api_patch.ApiPatcher`.
"""

from __future__ import annotations

import functools
import importlib
import importlib.resources
import sys
from collections.abc import Callable
from typing import Any

import torch
import yaml

from msprobe.core.api_patch import ApiPatcher as CoreApiPatcher
from msprobe.core.api_patch import Handler, resolve_attribute
from msprobe.pytorch.compiled import compile_escape

# Namespaces of the API list, with the prefix their entries carry.
NAMESPACES = {
    "functional": ("Functional", "torch.nn.functional"),
    "tensor": ("Tensor", "torch.Tensor"),
    "torch": ("Torch", "torch"),
    "_VF": ("VF", "torch._VF"),  # the recurrent kernels nn.LSTM calls
    "distributed": ("Distributed", "torch.distributed"),
    "torch_npu": ("NPU", "torch_npu"),
}


@functools.cache
def load_api_names() -> dict[str, tuple[str, ...]]:
    text = importlib.resources.files("msprobe.pytorch.dump").joinpath("api_names.yaml").read_text()
    return {namespace: tuple(names) for namespace, names in yaml.safe_load(text).items()}


def api_targets(selected: Callable[[str], bool] | None = None) -> list[tuple[Any, str, str]]:
    """(owner, attribute, key) for every listed API present in this torch (and torch_npu if imported)."""
    targets = []
    for namespace, names in load_api_names().items():
        prefix, module_name = NAMESPACES[namespace]
        if namespace == "torch_npu" and "torch_npu" not in sys.modules:
            continue  # never import torch_npu ourselves
        if namespace == "distributed" and not torch.distributed.is_available():
            continue
        root = torch.Tensor if namespace == "tensor" else importlib.import_module(module_name)
        for api in names:
            key = f"{prefix}.{api}"
            if selected is not None and not selected(key):
                continue
            try:
                owner, attribute = resolve_attribute(root, api)
            except AttributeError:
                continue  # not in this torch version
            targets.append((owner, attribute, key))
    return targets


def ApiPatcher(handler: Handler, selected: Callable[[str], bool] | None = None) -> CoreApiPatcher:
    """The core patcher over PyTorch's API list."""
    return CoreApiPatcher(handler, lambda: api_targets(selected), compile_escape())


_NO_DATA_WRITTEN = {"requires_grad_", "share_memory_", "detach_"}


def unlisted_in_place_targets() -> list[tuple[Any, str, str]]:
    """In-place APIs that are not in the API list: Tensor methods (``copy_``, ``zero_``, ``uniform_``...)
    and torch functions, among them the multi-tensor ones (``torch._foreach_mul_``,
    ``torch._fused_adamw_``, GradScaler's ``torch._amp_foreach_non_finite_check_and_unscale_``),
    some of which write without moving torch's version counter.

    They are never dumped; a dump watches them only to know which memory
    they wrote.
    """
    names = load_api_names()
    listed_methods, listed_functions = set(names["tensor"]), set(names["torch"])
    methods = [
        (torch.Tensor, name, f"Tensor.{name}")
        for name in dir(torch.Tensor)
        if name.endswith("_")
        and not name.startswith("_")
        and name not in listed_methods
        and name not in _NO_DATA_WRITTEN
        and callable(getattr(torch.Tensor, name, None))
    ]
    functions = [
        (torch, name, f"Torch.{name}")
        for name in dir(torch)
        if name.endswith("_")
        and not name.endswith("__")
        and name not in listed_functions
        and name not in _NO_DATA_WRITTEN
        and callable(getattr(torch, name, None))
    ]
    return methods + functions
