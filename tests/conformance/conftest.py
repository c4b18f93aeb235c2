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

import pandas as pd
import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))  # zoo and agreement, also read by dump_zoo.py

DRIVER = Path(__file__).resolve().parent / "dump_zoo.py"
ZYGOTE = Path(__file__).resolve().parent / "zygote.py"
DUMP_TIMEOUT = 600  # seconds one dump may take


class Zygote:
    """One tool's runs, its imports made once (zygote.py): each dump or command is a child forked from it."""

    def __init__(self, python: str, kind: str):
        self.process = subprocess.Popen(
            [python, str(ZYGOTE), kind], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, bufsize=1
        )

    def start(self, arguments: list[str], log: Path, env: dict[str, str] | None = None) -> None:
        assert self.process.stdin is not None
        self.process.stdin.write(json.dumps({"args": arguments, "log": str(log), "env": env or {}}) + "\n")
        self.process.stdin.flush()

    def wait(self) -> int:
        """The exit code of the run started last."""
        assert self.process.stdout is not None
        ready, _, _ = select.select([self.process.stdout], [], [], DUMP_TIMEOUT)
        line = self.process.stdout.readline() if ready else ""
        if not line:
            self.process.kill()
            raise AssertionError(f"the zygote ended or a run took over {DUMP_TIMEOUT} s (exit {self.process.poll()})")
        return int(json.loads(line)["code"])

    def close(self) -> None:
        if self.process.stdin is not None:
            self.process.stdin.close()
        try:
            self.process.wait(timeout=60)
        except subprocess.TimeoutExpired:
            self.process.kill()


_ZYGOTES: dict[tuple[str, str], Zygote] = {}  # this worker's, by (Python, kind): started on first use


def zygote(python: str, kind: str) -> Zygote:
    if (python, kind) not in _ZYGOTES:
        _ZYGOTES[python, kind] = Zygote(python, kind)
    return _ZYGOTES[python, kind]


@pytest.fixture(scope="session", autouse=True)
def _zygotes_end_with_the_session() -> Iterator[None]:
    yield
    for started in _ZYGOTES.values():
        started.close()
    _ZYGOTES.clear()


def run_msprobe(
    python: str, arguments: list[str], log: Path, env: dict[str, str] | None = None
) -> subprocess.CompletedProcess:
    """``msprobe ARGUMENTS`` of the environment of ``python``, forked from that tool's command zygote: what
    running the command gives (exit code, stdout, stderr), without starting the interpreter each time."""
    driver = zygote(python, "cli")
    driver.start(arguments, log, env)
    code = driver.wait()
    errors = Path(f"{log}.err")
    return subprocess.CompletedProcess(
        ["msprobe", *arguments], code, log.read_text(errors="replace"),
        errors.read_text(errors="replace") if errors.exists() else "",
    )  # fmt: skip


def read_table(path: Path) -> pd.DataFrame:
    """A compare table's cells as written, none taken for a missing value. calamine reads the same cells as
    openpyxl, eight times as fast: the session reads about a hundred tables of up to 50,000 cells."""
    return pd.read_excel(path, dtype=object, keep_default_na=False, engine="calamine")


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
                tools = {"reference": zygote(reference_python(), "dump"), "ours": zygote(sys.executable, "dump")}
                for tool, driver in tools.items():  # the two side by side
                    driver.start([model, task, level, str(folder / tool), *extra], folder / f"{tool}.log")
                for tool, driver in tools.items():
                    code = driver.wait()
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
                driver = zygote(sys.executable, "dump")
                driver.start([model, "untouched", "L1", str(folder)], folder / "run.log")
                assert driver.wait() == 0, (folder / "run.log").read_text()[-3000:]
        return folder

    return run
