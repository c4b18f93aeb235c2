"""Dumps from other processes: a run killed mid-step, and a two-rank torchrun job."""

import os
import signal
import subprocess
import sys
import textwrap

from msprobe.core.dump.reader import read_dump

KILLED_RUN = textwrap.dedent(
    """
    import os, signal, sys, torch
    import torch.nn.functional as F
    from msprobe.pytorch import PrecisionDebugger
    debugger = PrecisionDebugger(task="statistics", level="L1", dump_path=sys.argv[1])
    debugger.start()
    x = torch.randn(8, 8)
    for _ in range(5):
        x = F.relu(torch.matmul(x, x))
    os.kill(os.getpid(), signal.SIGKILL)
    """
)

DISTRIBUTED_RUN = textwrap.dedent(
    """
    import sys, torch, torch.distributed as dist
    from msprobe.pytorch import PrecisionDebugger
    dist.init_process_group("gloo")
    debugger = PrecisionDebugger(task="statistics", level="L1", dump_path=sys.argv[1])
    for step in range(2):
        debugger.start()
        x = torch.full((4,), float(dist.get_rank() + 1))
        dist.all_reduce(x)
        y = x * 2
        debugger.stop()
        debugger.step()
    dist.destroy_process_group()
    """
)


def test_entries_survive_a_killed_process(tmp_path):
    script = tmp_path / "run.py"
    script.write_text(KILLED_RUN)
    result = subprocess.run([sys.executable, str(script), str(tmp_path / "dump")], capture_output=True, text=True)
    assert result.returncode == -signal.SIGKILL
    folder = tmp_path / "dump" / "step0" / "rank"
    assert not (folder / "dump.json").exists()
    dump = read_dump(folder)
    assert dump.recovered and dump.task == "statistics"
    assert [f"Torch.matmul.{i}.forward" in dump.data for i in range(5)] == [True] * 5
    assert dump.data["Functional.relu.4.forward"]["output"][0]["Min"] >= 0


def test_the_journal_of_a_killed_run_is_the_same_with_and_without_the_c_path(tmp_path):
    """The per-call path in C writes the journal's lines into its mapping itself: byte for byte the Python way."""
    script = tmp_path / "run.py"
    script.write_text(KILLED_RUN.replace("debugger.start()", "debugger.start(); torch.manual_seed(0)"))
    journals = []
    for switch in ("0", "1"):
        dump_path = tmp_path / f"dump{switch}"
        env = {**os.environ, "MSPROBE_NO_FAST_PATH": switch}
        result = subprocess.run([sys.executable, str(script), str(dump_path)], capture_output=True, env=env)
        assert result.returncode == -signal.SIGKILL
        (journal,) = [path for path in (dump_path / "step0" / "rank").iterdir() if path.name != "construct.json"]
        journals.append(journal.read_bytes().rstrip(b"\0"))
    assert journals[0] == journals[1] and journals[0].count(b"\n") > 10


def test_two_ranks_with_torchrun(tmp_path, free_port):
    script = tmp_path / "dist.py"
    script.write_text(DISTRIBUTED_RUN)
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    command = [
        sys.executable,
        "-m",
        "torch.distributed.run",
        "--nproc_per_node=2",
        f"--master_port={free_port}",
        str(script),
        str(tmp_path / "dump"),
    ]
    result = subprocess.run(command, capture_output=True, text=True, env=env, timeout=240)
    assert result.returncode == 0, result.stderr[-3000:]
    for step in (0, 1):
        for rank in (0, 1):
            dump = read_dump(tmp_path / "dump" / f"step{step}" / f"rank{rank}" / "dump.json")
            entry = dump.data["Distributed.all_reduce.0.forward"]
            assert entry["input_args"][0]["Max"] == rank + 1.0
            # all_reduce wrote x without moving its version: its statistics must not be reused
            assert dump.data["Tensor.__mul__.0.forward"]["input_args"][0]["Max"] == 3.0
