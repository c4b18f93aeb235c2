"""The conformance session's shared pieces: both tools' dumps of a zoo model, made once per run.

The session runs over every core (pytest-xdist); a dump two workers need is made by the first to ask, while the
other waits on its lock.
"""

import contextlib
import fcntl
import os
import shutil
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))  # zoo and agreement, also read by dump_zoo.py

DRIVER = Path(__file__).resolve().parent / "dump_zoo.py"


def environment_python(variable: str) -> str:
    """The Python of a reference tool's environment, which the conformance nox session names in ``variable``."""
    python = os.environ.get(variable)
    if not python:
        pytest.fail(f"{variable} is not set: run these tests through `nox -s conformance`")
    return python


def reference_python() -> str:
    return environment_python("MSPROBE_REFERENCE_PYTHON")


def _shared_root(tmp_path_factory) -> Path:
    """One folder for every pytest-xdist worker of this run (the workers' own temporary folders lie in it), so a
    run two workers' tests need is made once; without xdist, the session's own temporary folder."""
    base = tmp_path_factory.getbasetemp()
    return base.parent if os.environ.get("PYTEST_XDIST_WORKER") else base


@contextlib.contextmanager
def _made_once(folder: Path) -> Iterator[bool]:
    """Hold ``folder``'s lock, yielding whether it is still to be made (then it is there, empty); the maker marks
    it done on success, so a failed make leaves it for the next test to try again (and report)."""
    folder.parent.mkdir(parents=True, exist_ok=True)
    with open(folder.parent / f"{folder.name}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # released when the file closes
        done = folder / ".made"
        if done.exists():
            yield False
            return
        shutil.rmtree(folder, ignore_errors=True)  # what a failed attempt left
        folder.mkdir()
        yield True
        done.touch()


@pytest.fixture(scope="session")
def dumps(tmp_path_factory):
    """Both tools' dump roots for a (model, task, level), each run once for all workers, the two side by side."""
    shared = _shared_root(tmp_path_factory) / "dumps"

    def dump(model: str, task: str, level: str, *extra: str) -> tuple[Path, Path]:
        key = (model, task, level, *extra)
        folder = shared / "-".join(part.strip("-") for part in key)
        with _made_once(folder) as to_make:
            if to_make:
                runs = {}
                for tool, python in (("reference", reference_python()), ("ours", sys.executable)):
                    log = (folder / f"{tool}.log").open("w")
                    command = [python, str(DRIVER), model, task, level, str(folder / tool), *extra]
                    runs[tool] = (subprocess.Popen(command, stdout=log, stderr=subprocess.STDOUT), log)
                for tool, (process, log) in runs.items():
                    code = process.wait(timeout=600)
                    log.close()
                    assert code == 0, f"{tool} failed on {key}:\n{(folder / f'{tool}.log').read_text()[-3000:]}"
        return folder / "ours" / "dump", folder / "reference" / "dump"

    return dump


@pytest.fixture(scope="session")
def untouched(tmp_path_factory):
    """A zoo model's run with no tool at all (dump_zoo.py's ``untouched``): its losses and its linear layers'
    output CRCs, per step."""
    shared = _shared_root(tmp_path_factory) / "untouched"

    def run(model: str) -> Path:
        folder = shared / model
        with _made_once(folder) as to_make:
            if to_make:
                command = [sys.executable, str(DRIVER), model, "untouched", "L1", str(folder)]
                done = subprocess.run(command, capture_output=True, text=True, timeout=600)
                assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
        return folder

    return run
