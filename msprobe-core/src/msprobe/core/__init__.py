"""msprobe's framework-free core.

``from msprobe.core import PrecisionDebugger`` is the framework-neutral front
door; the backends keep the reference's own import paths
(``msprobe.pytorch``, ``msprobe.mindspore``).
"""

from msprobe.core.backend_router import PrecisionDebugger, seed_all, select_backend
from msprobe.core.config import DebuggerConfig, load_config
from msprobe.core.errors import ConfigError, MsprobeError
from msprobe.core.version import __version__

__all__ = [
    "ConfigError",
    "DebuggerConfig",
    "MsprobeError",
    "PrecisionDebugger",
    "__version__",
    "load_config",
    "seed_all",
    "select_backend",
]
