"""msprobe for PyTorch, at the reference tool's import path."""

from msprobe.pytorch.debugger import PrecisionDebugger
from msprobe.pytorch.seed import seed_all

__all__ = ["PrecisionDebugger", "seed_all"]
