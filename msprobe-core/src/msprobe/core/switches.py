"""Environment switches that turn one of msprobe's C accelerators off, to compare or to rule one out.

``MSPROBE_NO_KERNELS`` (the one-pass statistics), ``MSPROBE_NO_C_JOURNAL`` (the
C journal write) and ``MSPROBE_NO_FAST_PATH`` (the PyTorch dump's per-call path);
see docs/installation.md. And one that turns
a path on where it would not run: ``MSPROBE_FORCE_DEVICE_PATH`` (CPU tensors
measured the way device tensors are, so CI exercises that path).
"""

from __future__ import annotations

import importlib.util
import logging
import os
import sys
from typing import Any

logger = logging.getLogger(__name__)


# a switch's former name, still honoured: scripts and job files that set it keep working
FORMER_NAMES = {"MSPROBE_NO_FAST_PATH": "MSPROBE_NO_LANE"}


def switched_off(variable: str) -> bool:
    """Whether ``variable`` (or its former name) is set to anything but nothing or ``0``
    (``MSPROBE_NO_KERNELS=1``, say)."""
    names = (variable, FORMER_NAMES[variable]) if variable in FORMER_NAMES else (variable,)
    return any(os.environ.get(name, "").strip() not in ("", "0") for name in names)


def switched_on(variable: str) -> bool:
    """The same test, for a switch that turns something on (``MSPROBE_FORCE_DEVICE_PATH=1``)."""
    return switched_off(variable)


def number(variable: str, default: int, least: int = 1) -> int:
    """A whole number from the environment (``MSPROBE_STATS_BATCH=512``), at least ``least``; the default when
    unset, and for anything else with a warning that names the variable."""
    text = os.environ.get(variable, "").strip()
    if text.isdigit():
        return max(least, int(text))
    if text:
        logger.warning("msprobe: %s=%r is not a whole number; %d is used instead", variable, text, default)
    return default


REQUIRE_VARIABLE = "MSPROBE_REQUIRE_EXTENSIONS"  # CI: an extension that did not build is an error, not a skip


def built_extension(module: Any, expected: int, name: str = "", python: tuple[int, int] = (3, 0)) -> Any:
    """``module`` (a C extension, or None where it was not built or is switched off) when its
    ``INTERFACE_VERSION`` is ``expected``; None otherwise, with one warning: a build left from an older checkout
    is not used with newer Python, whose twin in Python runs instead.

    With ``MSPROBE_REQUIRE_EXTENSIONS=1`` (set by the nox sessions), an extension ``name`` that was not built,
    or whose build is stale, raises ImportError instead: a C path that stopped compiling must fail the tests
    that would otherwise run its Python twin and pass. ``python``: the first Python the extension is for."""
    required = switched_on(REQUIRE_VARIABLE) and bool(name) and sys.version_info[:2] >= python
    if module is None:
        if required and importlib.util.find_spec(name) is None:
            raise ImportError(f"{name} was not built ({REQUIRE_VARIABLE} is set): is a C compiler installed?")
        return None
    found = getattr(module, "INTERFACE_VERSION", None)
    if found != expected:
        if required:
            raise ImportError(f"{module.__name__} is a stale build (interface {found}, this code needs {expected})")
        logger.warning(
            "msprobe: %s is a stale build (interface %s, this code needs %s) and is not used; reinstalling the "
            "package rebuilds it", module.__name__, found, expected,
        )  # fmt: skip
        return None
    return module
