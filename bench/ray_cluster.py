"""A Ray cluster of two nodes on this machine (a head and one worker, one CPU each), started with `ray start`
as on a real cluster, for the scale benchmark and the engine tests."""

from __future__ import annotations

import contextlib
import os
import socket
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path

RAY = str(Path(sys.executable).parent / "ray")
OBJECT_STORE_BYTES = 80 * 1024 * 1024


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def _ray(*arguments: str, env: dict) -> None:
    subprocess.run([RAY, *arguments], env=env, check=True, capture_output=True, text=True, timeout=120)


@contextlib.contextmanager
def two_nodes(python_path: list[str] | None = None) -> Iterator[tuple[str, int]]:
    """Yields (the head's address, the worker node's manager port); every Ray process of the machine is
    stopped after. ``python_path``: folders the workers import from (beside the installed packages)."""
    temp = tempfile.mkdtemp(prefix="msray", dir="/tmp")  # Ray's socket paths must stay short
    env = {**os.environ, "RAY_USAGE_STATS_ENABLED": "0"}
    if python_path:
        env["PYTHONPATH"] = os.pathsep.join(python_path)
    port, worker_port = free_port(), free_port()
    common = ["--num-cpus=1", "--node-ip-address=127.0.0.1", f"--object-store-memory={OBJECT_STORE_BYTES}",
              "--disable-usage-stats"]  # fmt: skip
    _ray("start", "--head", f"--port={port}", "--include-dashboard=false", f"--temp-dir={temp}", *common, env=env)
    address = f"127.0.0.1:{port}"
    try:
        _ray("start", f"--address={address}", f"--node-manager-port={worker_port}", *common, env=env)
        yield address, worker_port
    finally:
        with contextlib.suppress(ImportError):
            import ray

            if ray.is_initialized():
                ray.shutdown()
        subprocess.run([RAY, "stop", "--force"], env=env, capture_output=True, timeout=120)
