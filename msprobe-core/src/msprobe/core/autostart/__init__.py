"""Zero-code start: ``msprobe run -c config.json -- python train.py`` dumps a script nobody edited.

The command puts ``boot/`` at the front of ``PYTHONPATH``, so every Python process of the job (torchrun's
workers included) imports its ``sitecustomize`` at start-up. That module imports nothing of msprobe and only
waits: when the script imports a framework (``torch``), the backend's start-up function runs, which then waits
for the model's first call.
"""

from __future__ import annotations

import os
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any

CONFIG_VARIABLE = "MSPROBE_RUN_CONFIG"  # the config.json every process of the job dumps with
STARTERS_VARIABLE = "MSPROBE_RUN_STARTERS"  # "torch=msprobe.pytorch.autostart:begin;mindspore=..."
BOOT_FOLDER = Path(__file__).resolve().parent / "boot"


STARTED_VARIABLE = "MSPROBE_RUN_STARTED"  # when msprobe run started the job (seconds since the epoch)
DUMPING_VARIABLE = "MSPROBE_RUN_DUMPING"  # the pid of a process of the job that dumps; its children do not


def job_environment(
    config_path: str | os.PathLike[str], starters: Mapping[str, str], environ: Mapping[str, str]
) -> dict[str, str]:
    """The environment of a job that ``msprobe run`` starts: ``environ`` plus the config, the backends'
    start-up functions by framework module, and ``boot/`` first on ``PYTHONPATH``."""
    result = dict(environ)
    result[CONFIG_VARIABLE] = str(Path(config_path).resolve())
    result[STARTED_VARIABLE] = repr(time.time())  # what the job's programs wrote is newer than this
    result[STARTERS_VARIABLE] = ";".join(f"{module}={target}" for module, target in starters.items())
    given = environ.get("PYTHONPATH", "")
    # an empty entry of a non-empty PYTHONPATH means the working directory: kept, as Python reads it
    paths = [str(BOOT_FOLDER), *(given.split(os.pathsep) if given else [])]
    result["PYTHONPATH"] = os.pathsep.join(paths)
    return result


def helper_of_a_dumping_process(environ: Mapping[str, str] = os.environ) -> int | None:
    """The pid of the job's process this one was started by, when that process dumps (a spawn pool's worker, a
    DataLoader worker started by spawn): such a helper's calls are not the training's, and it writes nothing.
    None for a process of its own."""
    text = environ.get(DUMPING_VARIABLE, "")
    if not text.isdigit() or int(text) == os.getpid():
        return None
    try:
        os.kill(int(text), 0)  # alive: its child; a stale number (a program that ended) counts for nothing
    except ProcessLookupError:
        return None
    except PermissionError:
        pass
    return int(text)


def mark_dumping(environ: Any = os.environ) -> None:
    """This process dumps: the processes it starts from now on are its helpers (see above)."""
    environ[DUMPING_VARIABLE] = str(os.getpid())


def place_of_this_program(dump_path: str | os.PathLike[str], program: str, environ: Mapping[str, str] = os.environ):
    """Where this program of the job dumps: ``dump_path``, unless another program of the same job (``bash -c
    "python train.py && python eval.py"``) has dumped there already, whose dump is then kept and this one goes
    to ``dump_path/{program}.{pid}``. Returns (the folder, as the config spells it where it is ``dump_path``;
    words to tell the user, or None)."""
    root = Path(dump_path)
    try:
        started = float(environ.get(STARTED_VARIABLE, ""))
    except ValueError:
        return dump_path, None
    if not root.is_dir():
        return dump_path, None
    written = [*root.glob("step*/*/dump.json"), *root.glob("step*/*/.dump.json.journal")]
    if not any(_newer(path, started) for path in written):
        return dump_path, None
    place = root / f"{Path(program).stem or 'python'}.{os.getpid()}"
    return place, f"{root} holds the dump of another program of this job; this one dumps into {place}"


def _newer(path: Path, started: float) -> bool:
    try:
        return path.stat().st_mtime >= started
    except OSError:
        return False
