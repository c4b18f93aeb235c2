"""Which modules of a model can be hooked.

TorchScript modules (``torch.jit.script``, ``torch.jit.load``) refuse module
hooks and run without Python, so neither they nor what they call can be
seen; they are left out, and named once in a warning, rather than failing
the training.
"""

from __future__ import annotations

import logging

import torch

logger = logging.getLogger(__name__)


def hookable_modules(root: torch.nn.Module) -> tuple[list[tuple[str, torch.nn.Module]], list[str]]:
    """``root.named_modules()`` without TorchScript modules, and the outermost of those left out."""
    modules: list[tuple[str, torch.nn.Module]] = []
    scripted: list[str] = []
    for name, module in root.named_modules():
        if isinstance(module, torch.jit.ScriptModule):
            if not any(outer == "" or name.startswith(f"{outer}.") for outer in scripted):
                scripted.append(name)
            continue
        modules.append((name, module))
    return modules, [name or _scripted_name(root) for name in scripted]


def _scripted_name(module: torch.nn.Module) -> str:
    return getattr(module, "original_name", type(module).__name__)


def warn_unhooked(scripted: list[str], what: str) -> None:
    if scripted:
        logger.warning(
            "msprobe: TorchScript modules are not %s, nor the APIs they call "
            "(TorchScript runs without Python and takes no hooks): %s",
            what,
            ", ".join(scripted),
        )
