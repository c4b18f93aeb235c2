"""Weight gradients before and after data-parallel reduction on two MindSpore CPU ranks (its own scheduler)."""

import json
import os
import socket
import subprocess
import sys
from pathlib import Path

import pytest
from result_tables import check_rank_gradients

WORKER = Path(__file__).with_name("monitor_ranks_worker.py")
_PORT_TAKEN = "Failed to create the TCP server"  # what MindSpore's scheduler says when its port is in use


def test_unreduced_is_the_local_gradient_and_reduced_the_mean(tmp_path):
    (tmp_path / "m.json").write_text(json.dumps({"wg_distribution": True, "ops": ["norm"]}))
    # a port found free can be taken before the scheduler binds it, and MindSpore's own runtime (its scheduler's
    # heartbeats) may give up on a loaded machine: then another try; a Python error in any role is not retried
    for _attempt in range(3):
        processes, outputs = _run_ranks(tmp_path)
        codes = [p.returncode for p in processes]
        if all(code == 0 for code in codes) or any("Traceback" in output for output in outputs):
            break
    roles = ("scheduler", "worker 0", "worker 1")
    said = "\n".join(f"--- {role}, exit {code}:\n{output}" for role, code, output in zip(roles, codes, outputs))
    assert all(code == 0 for code in codes), said
    check_rank_gradients(tmp_path, "weight")
    for rank in (0, 1):  # the dump knows its rank too
        assert (tmp_path / "dump" / "step0" / f"rank{rank}" / "dump.json").exists()


def _run_ranks(tmp_path):
    """A scheduler and two workers on a port that was free a moment ago; their return codes and outputs."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    base = dict(os.environ, MS_WORKER_NUM="2", MS_SCHED_HOST="127.0.0.1", MS_SCHED_PORT=str(port))
    base["MONITOR_OUTPUT_DIR"] = str(tmp_path / "out")
    base["GLOG_v"] = "3"
    roles = [
        dict(MS_ROLE="MS_SCHED"),
        dict(MS_ROLE="MS_WORKER", MS_NODE_ID="0"),
        dict(MS_ROLE="MS_WORKER", MS_NODE_ID="1"),
    ]
    processes = [
        subprocess.Popen(
            [sys.executable, str(WORKER), str(tmp_path)],
            env={**base, **role},
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            cwd=tmp_path,
        )
        for role in roles
    ]
    outputs = []
    for index, process in enumerate(processes):
        try:
            output, _ = process.communicate(timeout=180)
        except subprocess.TimeoutExpired:
            for other in processes:
                other.kill()
            pytest.fail("the MindSpore ranks did not finish in 180 s")
        outputs.append(output.decode(errors="replace")[-3000:])
        if index == 0 and process.returncode != 0 and _PORT_TAKEN in output.decode(errors="replace"):
            for other in processes[1:]:  # the workers would wait for a scheduler that is not there
                other.kill()
                other.communicate()
            break
    return processes, outputs
