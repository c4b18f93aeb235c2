"""Imported at start-up by every Python process that ``msprobe run`` starts (this folder is first on PYTHONPATH).

It imports nothing of msprobe, so a process that never imports a framework (a launcher, a helper script) pays
next to nothing. It only waits: once the script imports a framework named in MSPROBE_RUN_STARTERS (``torch``),
that framework's start-up function (``msprobe.pytorch.autostart:begin``) runs with the config. Then any other
``sitecustomize`` on the path runs, as it would have without this one.
"""

import importlib
import importlib.abc
import importlib.machinery
import importlib.util
import os
import sys

CONFIG_VARIABLE = "MSPROBE_RUN_CONFIG"
STARTERS_VARIABLE = "MSPROBE_RUN_STARTERS"
_HERE = os.path.dirname(os.path.abspath(__file__))


def parse_starters(text):
    """``module=package.module:function`` pairs, ``;``-separated; malformed pairs are left out."""
    starters = {}
    for pair in text.split(";"):
        module, _, target = pair.partition("=")
        if module.strip() and ":" in target:
            starters[module.strip()] = target.strip()
    return starters


def run_starter(target, config_path):
    """A start-up function that fails leaves the job running without the dump, said once."""
    module_name, _, function = target.partition(":")
    try:
        getattr(importlib.import_module(module_name), function)(config_path)
    except Exception as exc:
        import logging

        logging.getLogger("msprobe").error(
            "msprobe: msprobe run could not start the dump (%s): %s: %s", target, type(exc).__name__, exc
        )


class AfterImport(importlib.abc.MetaPathFinder):
    """Runs a start-up function right after one top-level module has finished importing, once."""

    def __init__(self, module_name, target, config_path):
        self.module_name, self.target, self.config_path = module_name, target, config_path

    def find_spec(self, fullname, path, target=None):
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
        loader, execute = spec.loader, spec.loader.exec_module

        def execute_then_start(module):
            execute(module)
            loader.exec_module = execute
            run_starter(self.target, self.config_path)

        loader.exec_module = execute_then_start
        return spec


def install(environ=os.environ):
    config_path = environ.get(CONFIG_VARIABLE)
    starters = parse_starters(environ.get(STARTERS_VARIABLE, ""))
    if not config_path:
        return
    for module_name, target in starters.items():
        if module_name in sys.modules:  # imported already (by another sitecustomize): start at once
            run_starter(target, config_path)
        else:
            sys.meta_path.insert(0, AfterImport(module_name, target, config_path))


def run_next_sitecustomize():
    """Another ``sitecustomize`` on the path (a virtual environment's, a site's) still runs, after this one."""
    others = [entry for entry in sys.path if os.path.abspath(entry or ".") != _HERE]
    spec = importlib.machinery.PathFinder.find_spec("sitecustomize", others)
    if spec is None or spec.loader is None:
        return
    module = importlib.util.module_from_spec(spec)
    try:
        spec.loader.exec_module(module)
    except Exception as exc:
        import logging

        logging.getLogger("msprobe").warning("msprobe: %s failed: %s: %s", spec.origin, type(exc).__name__, exc)
        return
    sys.modules["sitecustomize"] = module  # `import sitecustomize` in the script finds its own, not this one


if __name__ == "sitecustomize":  # imported at start-up, not loaded by a test
    install()
    run_next_sitecustomize()
