"""The conformance session's shared pieces: both tools' dumps of a zoo model, made once per run.

The session runs over every core (pytest-xdist); a dump two workers need is made by the first to ask, while the
other waits on its lock. Each worker forks its dumps from one driver per tool (zygote.py), which imported torch
and transformers once.
"""

import contextlib
import fcntl
import json
import os
import select
import shutil
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))  # zoo and agreement, also read by dump_zoo.py

DRIVER = Path(__file__).resolve().parent / "dump_zoo.py"
ZYGOTE = Path(__file__).resolve().parent / "zygote.py"
DUMP_TIMEOUT = 600  # seconds one dump may take


class Zygote:
    """One tool's dump driver, its imports made once (zygote.py): each dump is a child forked from it."""

    def __init__(self, python: str):
        self.process = subprocess.Popen(
            [python, str(ZYGOTE)], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, bufsize=1
        )

    def start(self, arguments: list[str], log: Path) -> None:
        assert self.process.stdin is not None
        self.process.stdin.write(json.dumps({"args": arguments, "log": str(log)}) + "\n")
        self.process.stdin.flush()

    def wait(self) -> int:
        """The exit code of the dump started last."""
        assert self.process.stdout is not None
        ready, _, _ = select.select([self.process.stdout], [], [], DUMP_TIMEOUT)
        line = self.process.stdout.readline() if ready else ""
        if not line:
            self.process.kill()
            raise AssertionError(f"the dump driver ended or took over {DUMP_TIMEOUT} s (exit {self.process.poll()})")
        return int(json.loads(line)["code"])

    def close(self) -> None:
        if self.process.stdin is not None:
            self.process.stdin.close()
        try:
            self.process.wait(timeout=60)
        except subprocess.TimeoutExpired:
            self.process.kill()


@pytest.fixture(scope="session")
def zygotes() -> Iterator[dict[str, Zygote]]:
    """This worker's dump drivers, one per Python, started on first use."""
    started: dict[str, Zygote] = {}

    class Drivers(dict):
        def __missing__(self, python: str) -> Zygote:
            started[python] = self[python] = Zygote(python)
            return started[python]

    yield Drivers()
    for zygote in started.values():
        zygote.close()


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
def dumps(tmp_path_factory, zygotes):
    """Both tools' dump roots for a (model, task, level), each run once for all workers, the two side by side."""
    shared = _shared_root(tmp_path_factory) / "dumps"

    def dump(model: str, task: str, level: str, *extra: str) -> tuple[Path, Path]:
        key = (model, task, level, *extra)
        folder = shared / "-".join(part.strip("-") for part in key)
        with _made_once(folder) as to_make:
            if to_make:
                tools = {"reference": zygotes[reference_python()], "ours": zygotes[sys.executable]}
                for tool, driver in tools.items():  # the two side by side
                    driver.start([model, task, level, str(folder / tool), *extra], folder / f"{tool}.log")
                for tool, driver in tools.items():
                    code = driver.wait()
                    assert code == 0, f"{tool} failed on {key}:\n{(folder / f'{tool}.log').read_text()[-3000:]}"
        return folder / "ours" / "dump", folder / "reference" / "dump"

    return dump


@pytest.fixture(scope="session")
def untouched(tmp_path_factory, zygotes):
    """A zoo model's run with no tool at all (dump_zoo.py's ``untouched``): its losses and its linear layers'
    output CRCs, per step."""
    shared = _shared_root(tmp_path_factory) / "untouched"

    def run(model: str) -> Path:
        folder = shared / model
        with _made_once(folder) as to_make:
            if to_make:
                driver = zygotes[sys.executable]
                driver.start([model, "untouched", "L1", str(folder)], folder / "run.log")
                assert driver.wait() == 0, (folder / "run.log").read_text()[-3000:]
        return folder

    return run
