"""The reference's ``msprobe.pytorch.common`` import path (``from msprobe.pytorch.common import seed_all``)."""

from msprobe.core.lazy import lazy_exports

_EXPORTS = {"seed_all": "msprobe.pytorch.seed"}
__all__ = ["seed_all"]
__getattr__ = lazy_exports(__name__, _EXPORTS)
