"""msprobe for MindSpore, at the reference tool's import path.

Names resolve lazily: plugin discovery imports ``msprobe.mindspore.plugin``
and must not import mindspore.
"""

from msprobe.core.lazy import lazy_exports

_EXPORTS = {
    "PrecisionDebugger": "msprobe.mindspore.debugger",
    "seed_all": "msprobe.mindspore.seed",
    "TrainerMon": "msprobe.mindspore.monitor",
}
__all__ = ["PrecisionDebugger", "TrainerMon", "seed_all"]
__getattr__ = lazy_exports(__name__, _EXPORTS)
