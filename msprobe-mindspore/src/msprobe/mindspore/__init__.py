"""msprobe for MindSpore, at the reference tool's import path.

Names resolve lazily: plugin discovery imports ``msprobe.mindspore.plugin``
and must not import mindspore.
"""

from msprobe.core.lazy import lazy_exports

_EXPORTS = {
    "PrecisionDebugger": "msprobe.mindspore.debugger",
    "seed_all": "msprobe.mindspore.seed",
    "TrainerMon": "msprobe.mindspore.monitor",
    "MsprobeStep": "msprobe.mindspore.common.utils",
    "compare": "msprobe.core.compare.run",  # mindstudio-probe's Python compare functions
    "compare_distributed": "msprobe.core.compare.run",
}
__all__ = [
    "MsprobeStep",
    "PrecisionDebugger",
    "TrainerMon",
    "compare",
    "compare_distributed",
    "seed_all",
]
__getattr__ = lazy_exports(__name__, _EXPORTS)
