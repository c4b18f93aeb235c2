"""The result files' common rules: the timestamp in their names, and the rename that finishes one.

Each file is written under a private temporary name and renamed when whole,
so an interrupted run never leaves a result that looks complete (see
pipeline.py's ResultFiles).
"""

from __future__ import annotations

import os
import time
from pathlib import Path


def timestamp() -> str:
    return time.strftime("%Y%m%d%H%M%S")


def replace_file(temporary: Path, final: Path) -> Path:
    """A finished temporary (made by :func:`create_private`, its mode already set through its descriptor)
    renamed onto ``final``: a link planted at ``final`` is replaced, never written through."""
    os.replace(temporary, final)
    return final
