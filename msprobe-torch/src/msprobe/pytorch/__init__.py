"""msprobe for PyTorch, at the reference tool's import path.

Names resolve lazily: plugin discovery imports ``msprobe.pytorch.plugin``
and must not import torch.
"""

from msprobe.core.lazy import lazy_exports

_EXPORTS = {
    "PrecisionDebugger": "msprobe.pytorch.debugger",
    "seed_all": "msprobe.pytorch.seed",
    "TrainerMon": "msprobe.pytorch.monitor",
    "dump_generation": "msprobe.pytorch.generation",
}
__all__ = ["PrecisionDebugger", "TrainerMon", "dump_generation", "seed_all"]
__getattr__ = lazy_exports(__name__, _EXPORTS)
