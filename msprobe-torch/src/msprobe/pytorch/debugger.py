"""``msprobe.pytorch.PrecisionDebugger``: the core lifecycle plus what needs torch."""

from __future__ import annotations

from typing import Any

import torch

from msprobe.core.session import BaseDebugger


def distributed_rank() -> int | None:
    """The torch.distributed rank, or None when no process group is up."""
    dist = torch.distributed
    if dist.is_available() and dist.is_initialized():
        return dist.get_rank()
    return None


class PrecisionDebugger(BaseDebugger):
    framework = "pytorch"

    def current_rank(self) -> int | None:
        return distributed_rank()

    def is_model(self, obj: Any) -> bool:
        return isinstance(obj, torch.nn.Module)
