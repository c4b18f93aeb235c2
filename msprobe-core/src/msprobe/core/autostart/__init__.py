"""Zero-code start: ``msprobe run -c config.json -- python train.py`` dumps a script nobody edited.

The command puts ``boot/`` at the front of ``PYTHONPATH``, so every Python process of the job (torchrun's
workers included) imports its ``sitecustomize`` at start-up. That module only installs a watcher here: when
the script imports a framework (``torch``), the backend's start-up function runs, which then waits for the
model's first call. Processes that never import a framework pay nothing, and nothing is imported early.
"""

from __future__ import annotations

import importlib
import importlib.abc
import importlib.machinery
import importlib.util
import logging
import os
import sys
from collections.abc import Mapping
from pathlib import Path
from types import ModuleType
from typing import Any

logger = logging.getLogger("msprobe")

CONFIG_VARIABLE = "MSPROBE_RUN_CONFIG"  # the config.json every process of the job dumps with
STARTERS_VARIABLE = "MSPROBE_RUN_STARTERS"  # "torch=msprobe.pytorch.autostart:begin;mindspore=..."
BOOT_FOLDER = Path(__file__).resolve().parent / "boot"


def job_environment(
    config_path: str | os.PathLike[str], starters: Mapping[str, str], environ: Mapping[str, str]
) -> dict[str, str]:
    """The environment of a job that ``msprobe run`` starts: ``environ`` plus the config, the backends'
    start-up functions by framework module, and ``boot/`` first on ``PYTHONPATH``."""
    result = dict(environ)
    result[CONFIG_VARIABLE] = str(Path(config_path).resolve())
    result[STARTERS_VARIABLE] = ";".join(f"{module}={target}" for module, target in starters.items())
    paths = [str(BOOT_FOLDER), *(p for p in environ.get("PYTHONPATH", "").split(os.pathsep) if p)]
    result["PYTHONPATH"] = os.pathsep.join(paths)
    return result


def parse_starters(text: str) -> dict[str, str]:
    """``module=package.module:function`` pairs, ``;``-separated; malformed pairs are left out."""
    starters: dict[str, str] = {}
    for pair in text.split(";"):
        module, _, target = pair.partition("=")
        if module.strip() and ":" in target:
            starters[module.strip()] = target.strip()
    return starters


def install_from_environment(environ: Mapping[str, str] | None = None) -> None:
    """What ``boot/sitecustomize.py`` runs: watch for the frameworks named in the environment."""
    environ = os.environ if environ is None else environ
    config_path = environ.get(CONFIG_VARIABLE)
    starters = parse_starters(environ.get(STARTERS_VARIABLE, ""))
    if not config_path or not starters:
        return
    for module_name, target in starters.items():
        if module_name in sys.modules:  # imported already (by another sitecustomize): start at once
            _run_starter(target, config_path)
        else:
            sys.meta_path.insert(0, _AfterImport(module_name, target, config_path))


class _AfterImport(importlib.abc.MetaPathFinder):
    """Runs a start-up function right after one top-level module has finished importing, once."""

    def __init__(self, module_name: str, target: str, config_path: str):
        self.module_name = module_name
        self.target = target
        self.config_path = config_path

    def find_spec(self, fullname: str, path: Any, target: Any = None) -> importlib.machinery.ModuleSpec | None:
        if fullname != self.module_name:
            return None
        sys.meta_path.remove(self)  # once, and the real finders below find the module
        spec = None
        for finder in list(sys.meta_path):
            find = getattr(finder, "find_spec", None)
            spec = find(fullname, path, target) if find else None
            if spec is not None:
                break
        if spec is None or spec.loader is None or not hasattr(spec.loader, "exec_module"):
            return spec
        loader = spec.loader
        execute = loader.exec_module

        def execute_then_start(module: ModuleType) -> None:
            execute(module)
            loader.exec_module = execute  # type: ignore[method-assign]
            _run_starter(self.target, self.config_path)

        loader.exec_module = execute_then_start  # type: ignore[method-assign]
        return spec


def _run_starter(target: str, config_path: str) -> None:
    """A start-up function that fails leaves the job running without the dump, said once."""
    module_name, _, function = target.partition(":")
    try:
        getattr(importlib.import_module(module_name), function)(config_path)
    except Exception as exc:
        logger.error("msprobe: msprobe run could not start the dump (%s): %s: %s", target, type(exc).__name__, exc)


def run_next_sitecustomize() -> None:
    """Another ``sitecustomize`` on the path (a virtual environment's, a site's) still runs, after ours."""
    others = [entry for entry in sys.path if Path(entry or ".").resolve() != BOOT_FOLDER]
    spec = importlib.machinery.PathFinder.find_spec("sitecustomize", others)
    if spec is None or spec.loader is None:
        return
    module = importlib.util.module_from_spec(spec)
    try:
        spec.loader.exec_module(module)
    except Exception as exc:
        logger.warning("msprobe: %s failed: %s: %s", spec.origin, type(exc).__name__, exc)
