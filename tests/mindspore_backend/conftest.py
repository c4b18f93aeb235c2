"""These tests need MindSpore (its own nox session, with numpy<2): where it is not installed, pytest run at the
repository root leaves this folder out rather than failing to import it."""

import importlib.util
import sys
from pathlib import Path

if importlib.util.find_spec("mindspore") is None:
    collect_ignore_glob = ["*.py"]
else:
    sys.path.insert(0, str(Path(__file__).resolve().parent))  # this folder's helpers
