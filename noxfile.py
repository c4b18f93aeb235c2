"""Test sessions, one per package: MindSpore needs numpy<2, torch does not.

`nox` runs the default sessions (what CI runs); `nox -s demo` runs the demo.
torch is pinned so pip takes the CPU wheel instead of several GB of CUDA packages.
"""

from __future__ import annotations

import functools
import glob
import os
import shutil
import subprocess
import sys

import nox

# what `nox` runs (CI): every test session, in two lanes side by side (see ``ci``)
LANES = [
    ["lint", "docs", "core", "sanitizers", "torch", "mindspore"],
    ["conformance", "scale", "packaging", "mindspore_torch"],
]
nox.options.sessions = ["ci"]
nox.options.reuse_existing_virtualenvs = True
# uv makes each environment in seconds where pip takes a minute per torch install (it links from its cache); nox
# falls back to virtualenv and pip where uv is not installed
nox.options.default_venv_backend = "uv|virtualenv"
# every C extension must build: one that stops compiling fails the tests, rather than leaving its Python twin to
# pass them (msprobe.core.switches.built_extension)
os.environ.setdefault("MSPROBE_REQUIRE_EXTENSIONS", "1")
nox.options.error_on_missing_interpreters = True
KEEP_ENVIRONMENTS = bool(os.environ.get("MSPROBE_KEEP_VENVS"))

TORCH = "torch==2.13.0"
MINDSPORE = "mindspore==2.10.0"
# hypothesis: the fuzz tests of every parser; pip: the tests that install a plugin (uv makes no pip of its own);
# python-calamine: reads the xlsx tables eight times as fast as openpyxl
TEST_DEPS = ["pytest", "hatchling", "hypothesis", "pytest-xdist", "pip", "python-calamine"]
IN_PARALLEL = ["-n", "auto"]  # the larger suites over every core (pytest-xdist): each test runs in one worker
# suites whose files share an expensive fixture (a Ray cluster, a fresh environment built by pip): whole files
# go to one worker each, so no fixture is made twice
BY_FILE = ["-n", "auto", "--dist", "loadfile"]
REFERENCE = ["mindstudio-probe==1.2.2", "service_identity"]  # the reference tool, the conformance oracle
REFERENCE_26 = ["mindstudio-probe==26.2.0", "service_identity"]  # its newest release: we read its dumps, it ours
CORE = ["-e", "./msprobe-core[plots,tensorboard]", "-e", "./msprobe-cli"]


_PIP_TO_UV = {  # pip's configuration that uv reads under other names: where this machine's wheels lie
    "find-links": "UV_FIND_LINKS",
    "index-url": "UV_INDEX_URL",
    "extra-index-url": "UV_EXTRA_INDEX_URL",
    "constraint": "UV_CONSTRAINT",
}


def _uv_reads_pips_configuration() -> None:
    """uv ignores pip.conf and PIP_* variables; give it the same indexes, wheel folders and constraints, so a
    session installs what pip would have installed. Searching every index for the best match is pip's way too."""
    try:
        listing = subprocess.run(
            [sys.executable, "-m", "pip", "config", "list"], capture_output=True, text=True, timeout=60
        ).stdout
    except (OSError, subprocess.SubprocessError):
        listing = ""
    for line in listing.splitlines():
        key, _, value = line.partition("=")
        name = _PIP_TO_UV.get(key.rpartition(".")[2])
        if name and name not in os.environ:
            os.environ[name] = value.strip().strip("'\"")
    os.environ.setdefault("UV_INDEX_STRATEGY", "unsafe-best-match")
    # uv compiles no bytecode as it installs, and where PYTHONDONTWRITEBYTECODE is set no .pyc is ever written, so
    # each process a test starts compiled torch anew (import torch: 5 s, not 2). Python writes the .pyc of what is
    # imported, once: compiling all of torch and transformers at install (UV_COMPILE_BYTECODE) cost 50 s of CPU
    # per environment, and a run makes nine
    os.environ.pop("PYTHONDONTWRITEBYTECODE", None)


_uv_reads_pips_configuration()


def session(*args, **kwargs):
    """A nox session whose virtual environments go once it ends, unless MSPROBE_KEEP_VENVS is set: most sessions
    install torch or MindSpore (1 to 4 GB each), and a full run keeping them all needs about 18 GB of free disk,
    instead of about 6 GB. Set it while working on one session, so that reruns reuse its environment."""

    def register(body):
        @functools.wraps(body)
        def run_then_free(session: nox.Session) -> None:
            try:
                body(session)
            finally:
                if not KEEP_ENVIRONMENTS:
                    _free_environments(session)

        return nox.session(*args, **kwargs)(run_then_free)

    if len(args) == 1 and callable(args[0]) and not kwargs:
        body, args = args[0], ()
        return register(body)
    return register


def _free_environments(session: nox.Session) -> None:
    """The session's virtual environment and those it made beside it (the conformance session's reference tools)."""
    location = getattr(session.virtualenv, "location", None)
    if not location or not os.path.isdir(location):
        return
    for folder in [location, *_REFERENCE_FOLDERS.pop(session.name, [])]:
        shutil.rmtree(folder, ignore_errors=True)


_REFERENCE_FOLDERS: dict[str, list[str]] = {}


@nox.session(python=False)
def ci(session: nox.Session) -> None:
    """Every test session, in two lanes that run side by side (each lane a ``nox -s ...`` of its own), their
    output interleaved line by line under the lane's number. A lane spends much of its time installing
    environments or in a test's single process, and the other lane fills those gaps: on the 2-core CI machine
    the whole run takes about a third less than the sessions one after another. ``nox -s NAME`` still runs one
    session alone; the lanes' sessions, one after another: ``nox -s lint docs core ...``."""
    import threading

    lanes = [session.posargs] if session.posargs else LANES
    processes = []
    for lane in lanes:
        command = [sys.executable, "-m", "nox", "--noxfile", __file__, "-s", *lane]
        processes.append(
            subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, bufsize=1)
        )

    def relay(number: int, process: subprocess.Popen) -> None:
        assert process.stdout is not None
        for line in process.stdout:
            print(f"[{number}] {line}", end="", flush=True)

    relays = [threading.Thread(target=relay, args=(n, p), daemon=True) for n, p in enumerate(processes, 1)]
    for thread in relays:
        thread.start()
    codes = [process.wait() for process in processes]
    for thread in relays:
        thread.join(timeout=10)
    failed = [" ".join(lane) for lane, code in zip(lanes, codes) if code != 0]
    if failed:
        session.error(f"failed in the lane(s): {'; '.join(failed)}")


@session
def lint(session: nox.Session) -> None:
    session.install("ruff==0.17.6")
    session.run("ruff", "check", ".")
    session.run("ruff", "format", "--check", ".")


@session
def docs(session: nox.Session) -> None:
    """The documentation site from docs/ (MkDocs, Material); --strict: a broken link or anchor fails."""
    session.install("mkdocs==1.6.1", "mkdocs-material==9.8.2", "mkdocstrings[python]==1.0.8")
    session.run("mkdocs", "build", "--strict", "--site-dir", "site", env={"NO_MKDOCS_2_WARNING": "1"})


def _python(version: str) -> str:
    """An interpreter of ``version`` that runs: on PATH, or one pyenv installed but does not put on PATH."""
    pattern = os.path.expanduser(f"~/.pyenv/versions/{version}.*/bin/python{version}")
    for candidate in (shutil.which(f"python{version}"), *sorted(glob.glob(pattern))):
        if candidate and subprocess.run([candidate, "--version"], capture_output=True).returncode == 0:
            return candidate
    return version  # nox then says it is missing


@session(python=_python("3.10"))
def core(session: nox.Session) -> None:
    """msprobe-core and msprobe-cli with no framework installed (tb-graph-ascend: the reference's graph viewer),
    on the lowest Python the packages claim (requires-python >= 3.10). Every other session runs core's code on
    3.11 under a framework, so core's own tests run once, where a feature newer than 3.10 would fail them (torch's
    CPU wheel on this machine is for 3.11 only: the backends' sessions cannot take 3.10). The stack walker's C twin
    is built for 3.11 alone (it reads 3.11's frames): its tests run in ``sanitizers``."""
    session.install(*TEST_DEPS, "tb-graph-ascend", *CORE)
    session.run("pytest", *IN_PARALLEL, "tests/core", "tests/cli", *session.posargs)


SANITIZE = "-fsanitize=address,undefined -fno-sanitize-recover=undefined -fno-omit-frame-pointer -g -O1"
SANITIZED_TESTS = [  # every test that drives msprobe-core's C extensions, the fuzz targets among them
    "tests/core/test_c_entry_points.py", "tests/core/test_fuzz.py", "tests/core/test_table_rows.py",
    "tests/core/test_compare_large.py", "tests/core/test_float_stats.py", "tests/core/test_stack.py",
    "tests/core/test_spreadsheet.py", "tests/core/test_api_patch.py", "tests/core/test_xlsx.py",
    "tests/core/test_journal_c.py",
    # msprobe-torch's per-call path in C, its fuzz target among them
    "tests/torch_backend/test_fast_path.py", "tests/torch_backend/test_fast_path_fuzz.py",
    "tests/torch_backend/test_statistics_kernels.py",
]  # fmt: skip


@session
def sanitizers(session: nox.Session) -> None:
    """msprobe-core's and msprobe-torch's C extensions built with AddressSanitizer and UndefinedBehaviorSanitizer,
    and the tests that drive them: any read or write out of bounds or undefined operation ends the run. Built
    from a copy of the sources, so no earlier build of the extensions is reused."""
    compiler = shutil.which("gcc")
    runtimes = [
        subprocess.run([compiler, f"-print-file-name={name}"], capture_output=True, text=True).stdout.strip()
        for name in ("libasan.so", "libubsan.so")
    ] if compiler else []  # fmt: skip
    if not runtimes or not all(os.path.isabs(path) for path in runtimes):
        session.skip("no gcc with the sanitizer runtimes here")
    source = session.create_tmp()
    shutil.rmtree(source)
    folders = ("msprobe-core", "msprobe-cli", "msprobe-torch")
    for folder in folders:
        shutil.copytree(folder, os.path.join(source, folder), ignore=shutil.ignore_patterns("build", "*.so"))
    shutil.copy("VERSION", source)
    session.install(TORCH)
    session.install(*TEST_DEPS, "setuptools>=77", "wheel")
    flags = {"CFLAGS": SANITIZE, "LDFLAGS": "-fsanitize=address,undefined"}
    no_cache = "--no-cache" if session.venv_backend == "uv" else "--no-cache-dir"
    session.install("--no-build-isolation", no_cache, *(os.path.join(source, f) for f in folders), env=flags)
    session.run(
        "pytest", "-p", "no:cacheprovider", *IN_PARALLEL, *SANITIZED_TESTS, *session.posargs,
        env={"LD_PRELOAD": ":".join(runtimes), "ASAN_OPTIONS": "detect_leaks=0:abort_on_error=1",
             "UBSAN_OPTIONS": "halt_on_error=1:print_stacktrace=1", "PYTHONMALLOC": "malloc"},
    )  # fmt: skip


def _ensure_chromium(session: nox.Session) -> None:
    """The graph-page tests drive Debian's Chromium through Playwright; no browser is downloaded."""
    if os.environ.get("MSPROBE_CHROMIUM") or shutil.which("chromium"):
        return
    if hasattr(os, "geteuid") and os.geteuid() != 0:
        session.error("the browser tests need Debian's chromium: sudo apt-get install chromium")
    command = "apt-get install -y -q chromium || (apt-get update -q && apt-get install -y -q chromium)"
    # flock: the two lanes of `nox` (ci) may both want it, and apt takes one install at a time
    session.run("flock", "/tmp/msprobe-apt.lock", "sh", "-c", command, external=True)


@session
def torch(session: nox.Session) -> None:
    _ensure_chromium(session)
    session.install(TORCH)
    session.install(*TEST_DEPS, "playwright", *CORE, "-e", "./msprobe-torch[huggingface,lightning]")
    session.run("pytest", *IN_PARALLEL, "tests/torch_backend", *session.posargs)


@session
def scale(session: nox.Session) -> None:
    """The Parquet store (pyarrow), SQL over it (DuckDB), the trend page, and the Ray engine (compare, db build,
    run_ut) on a cluster of two nodes started on this machine."""
    _ensure_chromium(session)
    session.install(TORCH)  # run_ut split over the cluster
    session.install(  # huggingface: the diagnosis benchmark's models that db trend's rule is checked on
        *TEST_DEPS, "playwright", "-e", "./msprobe-core[db,ray]", "-e", "./msprobe-cli",
        "-e", "./msprobe-torch[huggingface]",
    )  # fmt: skip
    session.run("pytest", *BY_FILE, "tests/scale", *session.posargs)


@session
def screenshots(session: nox.Session) -> None:
    """The graph-page pictures of docs/img, taken afresh by the browser tests (not a CI session: it rewrites them)."""
    _ensure_chromium(session)
    session.install(TORCH)
    session.install(*TEST_DEPS, "playwright", *CORE, "-e", "./msprobe-torch")
    session.run("pytest", "tests/torch_backend/test_graph_browser.py", env={"MSPROBE_TEST_ARTIFACTS": "docs/img"})


@session
def mindspore(session: nox.Session) -> None:
    session.install("numpy<2", MINDSPORE)
    session.install(*TEST_DEPS, "numpy<2", *CORE, "-e", "./msprobe-mindspore")
    # with it, the .npy writer under the numpy<2 MindSpore needs
    session.run("pytest", *IN_PARALLEL, "tests/mindspore_backend", "tests/core/test_npy_file.py", *session.posargs)


@session
def mindspore_torch(session: nox.Session) -> None:
    """MindSpore with torch beside it: run_ut's benchmark is then the PyTorch twin; both backends measure alike."""
    session.install("numpy<2", MINDSPORE, TORCH)
    session.install(*TEST_DEPS, "numpy<2", *CORE, "-e", "./msprobe-mindspore", "-e", "./msprobe-torch")
    session.run("pytest", "tests/mindspore_torch", "tests/mindspore_backend/test_run_ut.py", *session.posargs)


@session
def conformance(session: nox.Session) -> None:
    """Our dumps of a zoo of real models against the reference tool's, made in the same run.

    The reference (mindstudio-probe 1.2.2) shares the ``msprobe`` import name, so it gets a virtual
    environment of its own beside this session's; the tests run it as a subprocess. Over every core: a test's
    two tools run side by side, and the faster waits for the reference, so a second worker fills the gap.
    """
    session.install(TORCH)
    session.install(*TEST_DEPS, *CORE, "-e", "./msprobe-torch[huggingface]")
    pythons = {
        "MSPROBE_REFERENCE_PYTHON": _reference_env(session, "conformance_reference", REFERENCE),
        "MSPROBE_REFERENCE26_PYTHON": _reference_env(session, "conformance_reference26", REFERENCE_26),
    }
    session.run("pytest", *IN_PARALLEL, "tests/conformance", *session.posargs, env=pythons)


def _uv() -> str | None:
    """uv's program, where nox found it (installed beside nox, or on PATH)."""
    try:
        from uv import find_uv_bin

        return find_uv_bin()
    except (ImportError, FileNotFoundError):
        return shutil.which("uv")


def _session_python(session: nox.Session) -> str:
    return os.path.join(session.virtualenv.location, "bin", "python")


def _reference_env(session: nox.Session, name: str, packages: list[str]) -> str:
    """A virtual environment of its own beside the session's, made once: its Python."""
    folder = os.path.join(os.path.dirname(session.virtualenv.location), name)
    _REFERENCE_FOLDERS.setdefault(session.name, []).append(folder)
    python = os.path.join(folder, "bin", "python")
    marker = os.path.join(folder, "installed")
    wanted = "\n".join([TORCH, *packages])
    if not os.path.exists(marker) or open(marker).read() != wanted:
        uv = _uv()
        if uv:
            session.run(uv, "venv", "--quiet", "--clear", "--python", _session_python(session), folder, external=True)
            pip = [uv, "pip", "install", "--quiet", "--python", python]
        else:
            session.run("python", "-m", "venv", "--clear", folder)
            pip = [python, "-m", "pip", "install", "--quiet", "--disable-pip-version-check"]
        session.run(*pip, TORCH, external=True)
        session.run(*pip, *packages, "transformers", external=True)
        with open(marker, "w") as handle:
            handle.write(wanted)
    return python


@session
def packaging(session: nox.Session) -> None:
    """Each distribution installs alone into a fresh virtual environment; so do the plugin tutorial's plugins."""
    session.install(*TEST_DEPS, *CORE)
    session.run("pytest", *BY_FILE, "tests/packaging", *session.posargs, env={"MSPROBE_TORCH_REQUIREMENT": TORCH})


@session
def demo(session: nox.Session) -> None:
    """Dump a small model twice, compare the two runs, print the verdict."""
    session.install(TORCH)
    session.install(*CORE, "-e", "./msprobe-torch")
    session.run("python", "examples/demo.py", *session.posargs)


@nox.session(python=False)
def device(session: nox.Session) -> None:
    """The checks that need a GPU or an Ascend NPU (bench/device_check.py), run by the interpreter that runs nox:
    on a lent machine that is the image's own Python, which holds torch and has no network to fill a new
    environment (bench/device_wheels.sh gathers the other wheels it needs). With no CUDA or NPU device it
    prints one line and passes. Not part of a plain `nox` run."""
    session.run(sys.executable, "bench/device_check.py", *session.posargs, external=True)
