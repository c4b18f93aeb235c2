"""How msprobe's messages reach a person: on stderr, each with one prefix (``msprobe: warning: ...``).

The command line shows warnings and errors (``-v``: everything). A training
process shows msprobe's information too (where the dump went, what it cost),
as mindstudio-probe does, unless the program set up logging itself: then
its own handlers decide.
"""

from __future__ import annotations

import logging
import sys
from typing import Any

_LEVEL_WORDS = {logging.WARNING: "warning: ", logging.ERROR: "error: ", logging.CRITICAL: "error: "}


class StderrHandler(logging.StreamHandler):
    """Writes to the sys.stderr of the moment (click's test runner swaps it)."""

    @property
    def stream(self) -> Any:
        return sys.stderr

    @stream.setter
    def stream(self, _value: Any) -> None:
        pass


class Prefixed(logging.Formatter):
    """``msprobe: warning: text``; a message that carries the prefix already gets it once."""

    def format(self, record: logging.LogRecord) -> str:
        text = record.getMessage()
        if text.startswith("msprobe: "):
            text = text[len("msprobe: ") :]
        return f"msprobe: {_LEVEL_WORDS.get(record.levelno, '')}{text}"


def show_messages(level: int | None = logging.WARNING) -> None:
    """One stderr handler on the ``msprobe`` logger (installed once), showing ``level`` and above; ``None``:
    the level it has once the handler is there (warnings, when it is installed now)."""
    logger = logging.getLogger("msprobe")
    if not any(isinstance(handler, StderrHandler) for handler in logger.handlers):
        handler = StderrHandler()
        handler.setFormatter(Prefixed())
        logger.addHandler(handler)
        level = logging.WARNING if level is None else level
    if level is not None:
        logger.setLevel(level)


def show_in_training() -> None:
    """A training process: information and above, unless the program configured logging (its handlers on
    the root or the ``msprobe`` logger then decide what is shown)."""
    logger = logging.getLogger("msprobe")
    if any(isinstance(handler, StderrHandler) for handler in logger.handlers):
        return
    if logging.getLogger().handlers or logger.handlers:
        return
    show_messages(logging.INFO)
