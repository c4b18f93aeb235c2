"""A Ray cluster of two nodes on this machine (a head and one worker, one CPU each), started with `ray start`
as on a real cluster, for the scale benchmark and the engine tests."""

from __future__ import annotations

import contextlib
import os
import secrets
import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from unittest import mock

RAY = str(Path(sys.executable).parent / "ray")
OBJECT_STORE_BYTES = 80 * 1024 * 1024


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def _ray(*arguments: str, env: dict) -> None:
    subprocess.run([RAY, *arguments], env=env, check=True, capture_output=True, text=True, timeout=120)


def _processes_using(folder: str) -> list[int]:
    """The processes whose command line names ``folder``: this cluster's, not another user's or test's."""
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit() or int(entry.name) == os.getpid():
            continue
        with contextlib.suppress(OSError):
            if folder.encode() in (entry / "cmdline").read_bytes():
                found.append(int(entry.name))
    return found


def _stop(folder: str, env: dict) -> None:
    """Stop this cluster's processes only (``ray stop`` would stop every Ray process of the machine)."""
    for signal_number in (signal.SIGTERM, signal.SIGKILL):
        for pid in _processes_using(folder):
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.kill(pid, signal_number)
        deadline = time.monotonic() + 15
        while _processes_using(folder) and time.monotonic() < deadline:
            time.sleep(0.2)


@contextlib.contextmanager
def two_nodes(python_path: list[str] | None = None) -> Iterator[tuple[str, int]]:
    """Yields (the head's address, the worker node's manager port); this cluster's processes are stopped
    after. ``python_path``: folders the workers import from (beside the installed packages). Every node and
    this process use one token made here (Ray 2.52 and later; older versions ignore it), so a token Ray
    left in ~/.ray by an earlier local cluster makes no difference."""
    temp = tempfile.mkdtemp(prefix="msray", dir="/tmp")  # Ray's socket paths must stay short
    auth = {"RAY_AUTH_MODE": "token", "RAY_AUTH_TOKEN": secrets.token_hex(32)}
    env = {**os.environ, "RAY_USAGE_STATS_ENABLED": "0", **auth}
    if python_path:
        env["PYTHONPATH"] = os.pathsep.join(python_path)
    port, worker_port = free_port(), free_port()
    common = ["--num-cpus=1", "--node-ip-address=127.0.0.1", f"--object-store-memory={OBJECT_STORE_BYTES}",
              "--disable-usage-stats"]  # fmt: skip
    with mock.patch.dict(os.environ, auth):  # for ray.init in this process
        try:
            _ray("start", "--head", f"--port={port}", "--include-dashboard=false", f"--temp-dir={temp}", *common,
                 env=env)  # fmt: skip
            address = f"127.0.0.1:{port}"
            # the worker node's files go under the head's temp folder too, so _stop finds its processes
            _ray("start", f"--address={address}", f"--node-manager-port={worker_port}", f"--temp-dir={temp}",
                 *common, env=env)  # fmt: skip
            yield address, worker_port
        finally:
            with contextlib.suppress(ImportError):
                import ray

                if ray.is_initialized():
                    ray.shutdown()
            _stop(temp, env)
