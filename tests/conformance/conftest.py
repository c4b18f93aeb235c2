"""The conformance session's shared pieces: both tools' dumps of a zoo model, made once per session."""

import os
import subprocess
import sys
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


@pytest.fixture(scope="session")
def dumps(tmp_path_factory):
    """Both tools' dump roots for a (model, task, level), each run once, the two side by side."""
    made: dict[tuple, tuple[Path, Path]] = {}

    def dump(model: str, task: str, level: str, *extra: str) -> tuple[Path, Path]:
        key = (model, task, level, *extra)
        if key not in made:
            folder = tmp_path_factory.mktemp("-".join(part.strip("-") for part in key))
            runs = {}
            for tool, python in (("reference", reference_python()), ("ours", sys.executable)):
                log = (folder / f"{tool}.log").open("w")
                command = [python, str(DRIVER), model, task, level, str(folder / tool), *extra]
                runs[tool] = (subprocess.Popen(command, stdout=log, stderr=subprocess.STDOUT), log)
            for tool, (process, log) in runs.items():
                code = process.wait(timeout=600)
                log.close()
                assert code == 0, f"{tool} failed on {key}:\n{(folder / f'{tool}.log').read_text()[-3000:]}"
            made[key] = (folder / "ours" / "dump", folder / "reference" / "dump")
        return made[key]

    return dump


@pytest.fixture(scope="session")
def untouched(tmp_path_factory):
    """A zoo model's run with no tool at all (dump_zoo.py's ``untouched``): its losses and its linear layers'
    output CRCs, per step."""
    made: dict[str, Path] = {}

    def run(model: str) -> Path:
        if model not in made:
            folder = tmp_path_factory.mktemp(f"{model}-untouched")
            command = [sys.executable, str(DRIVER), model, "untouched", "L1", str(folder)]
            done = subprocess.run(command, capture_output=True, text=True, timeout=600)
            assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
            made[model] = folder
        return made[model]

    return run
