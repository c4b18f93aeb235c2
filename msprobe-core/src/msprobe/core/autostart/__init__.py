"""Zero-code start: ``msprobe run -c config.json -- python train.py`` dumps a script nobody edited.

The command puts ``boot/`` at the front of ``PYTHONPATH``, so every Python process of the job (torchrun's
workers included) imports its ``sitecustomize`` at start-up. That module imports nothing of msprobe and only
waits: when the script imports a framework (``torch``), the backend's start-up function runs, which then waits
for the model's first call.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path

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
