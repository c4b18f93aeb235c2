"""Environment switches that turn one of msprobe's C accelerators off, to compare or to rule one out.

``MSPROBE_NO_KERNELS`` (the one-pass statistics) and ``MSPROBE_NO_LANE`` (the
PyTorch dump's per-call path); see docs/installation.md.
"""

from __future__ import annotations

import os


def switched_off(variable: str) -> bool:
    """Whether ``variable`` is set to anything but nothing or ``0`` (``MSPROBE_NO_KERNELS=1``, say)."""
    return os.environ.get(variable, "").strip() not in ("", "0")
