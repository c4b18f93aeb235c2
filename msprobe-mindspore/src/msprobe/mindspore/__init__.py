"""msprobe for MindSpore, at the reference tool's import path."""

from msprobe.mindspore.debugger import PrecisionDebugger
from msprobe.mindspore.seed import seed_all

__all__ = ["PrecisionDebugger", "seed_all"]
