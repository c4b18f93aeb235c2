"""These tests need MindSpore and torch together (their own nox session, with numpy<2): where either is not
installed, pytest run at the repository root leaves this folder out rather than failing to import it."""

import importlib.util

if importlib.util.find_spec("mindspore") is None or importlib.util.find_spec("torch") is None:
    collect_ignore_glob = ["*.py"]
