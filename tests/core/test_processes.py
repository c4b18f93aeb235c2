"""Pool workers end when the process that started them is killed outright."""

import os
import signal
import subprocess
import sys
import textwrap
import time

SCRIPT = textwrap.dedent(
    """
    import os, sys, time
    from msprobe.core.processes import worker_pool

    def pid(_):
        time.sleep(0.2)
        return os.getpid()

    if __name__ == "__main__":
        pool = worker_pool(2)
        pids = sorted(set(pool.map(pid, range(6))))
        print(" ".join(map(str, pids)), flush=True)
        time.sleep(600)  # killed from outside while the workers wait for work
    """
)


def alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    with open(f"/proc/{pid}/stat") as handle:  # a zombie is gone for our purposes
        return handle.read().split()[2] != "Z"


def test_workers_end_when_their_parent_is_killed(tmp_path):
    script = tmp_path / "parent.py"
    script.write_text(SCRIPT)
    parent = subprocess.Popen([sys.executable, str(script)], stdout=subprocess.PIPE, text=True)
    workers = [int(pid) for pid in parent.stdout.readline().split()]
    assert workers and all(alive(pid) for pid in workers)
    parent.send_signal(signal.SIGKILL)
    parent.wait(timeout=30)
    deadline = time.monotonic() + 30
    while any(alive(pid) for pid in workers) and time.monotonic() < deadline:
        time.sleep(0.2)
    assert not any(alive(pid) for pid in workers)
