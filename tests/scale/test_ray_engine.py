"""--engine ray on a real cluster: a head and one worker node started with `ray start` on this machine, one CPU
each. The results must equal the local engine's, and a job must complete when the worker node is killed mid-job.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pandas as pd
import pytest
from repo_paths import REPO_ROOT

from msprobe.core.compare.run import compare_distributed
from msprobe.core.jobs import Engine, run_jobs
from msprobe.core.store.build import build_store
from msprobe.core.store.query import run_query
from ray_cluster import two_nodes
from synthetic_ranks import write_run


@pytest.fixture(scope="module")
def cluster():
    """(address, the worker node's manager port); the workers import from tests/scale (ray_jobs.py)."""
    with two_nodes([str(REPO_ROOT / "tests" / "scale"), str(REPO_ROOT / "tests")]) as found:
        yield found


def _worker_node(address: str, worker_port: int) -> str:
    import ray

    if not ray.is_initialized():
        ray.init(address=address, log_to_driver=False)
    [node] = [n["NodeID"] for n in ray.nodes() if n["Alive"] and n["NodeManagerPort"] == worker_port]
    return node


def _node_processes(worker_port: int) -> list:
    """The worker node's raylet and everything it started (its worker processes)."""
    import psutil

    found = subprocess.run(["pgrep", "-f", f"node_manager_port={worker_port}"], capture_output=True, text=True)
    processes = []
    for pid in map(int, found.stdout.split()):
        try:
            raylet = psutil.Process(pid)
            processes += [raylet, *raylet.children(recursive=True)]
        except psutil.NoSuchProcess:
            pass
    return processes


def _kill_node(worker_port: int) -> None:
    for process in _node_processes(worker_port):
        try:
            os.kill(process.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass


def _results(folder: Path) -> dict[str, pd.DataFrame]:
    """Each rank's compare table, by rank (the file names carry a time stamp)."""
    tables = {}
    for path in sorted(folder.glob("compare_result_rank*.xlsx")):
        tables[path.name.split("_")[2]] = pd.read_excel(path)
    return tables


def test_a_64_rank_compare_on_ray_equals_the_local_engines(cluster, tmp_path):
    address, _ = cluster
    write_run(tmp_path / "npu", 64, 1, 6)
    write_run(tmp_path / "bench", 64, 1, 6, drift=1.001)
    npu, bench = tmp_path / "npu" / "step0", tmp_path / "bench" / "step0"
    local = compare_distributed(npu, bench, tmp_path / "local", engine=Engine(workers=2))
    on_ray = compare_distributed(npu, bench, tmp_path / "ray", engine=Engine("ray", address=address))
    assert [s.line() for s in on_ray] == [s.line() for s in local] and len(local) == 64
    local_tables, ray_tables = _results(tmp_path / "local"), _results(tmp_path / "ray")
    assert sorted(ray_tables) == sorted(local_tables) and len(ray_tables) == 64
    for rank, table in local_tables.items():
        pd.testing.assert_frame_equal(ray_tables[rank], table)
    assert (local_tables["rank0"]["Max diff"].abs() > 0).any()  # the drift shows: the tables hold real values


def test_db_build_on_ray_equals_the_local_build(cluster, tmp_path):
    address, _ = cluster
    write_run(tmp_path / "dump", 16, 3, 4, bad=(1, 5, 2))
    build_store(tmp_path / "dump", tmp_path / "local", engine=Engine(workers=2))
    build_store(tmp_path / "dump", tmp_path / "ray", engine=Engine("ray", address=address))
    sql = "SELECT step, rank, seq, name, io, arg, max, min, mean, norm FROM stats ORDER BY step, rank, seq"
    pd.testing.assert_frame_equal(run_query(tmp_path / "ray", sql), run_query(tmp_path / "local", sql))


def test_a_job_completes_when_the_worker_node_is_killed(cluster, tmp_path):
    address, worker_port = cluster
    worker = _worker_node(address, worker_port)
    marks = tmp_path / "marks"
    marks.mkdir()
    killed = threading.Event()

    def kill_the_worker_once_it_has_work() -> None:
        deadline = time.monotonic() + 60
        while not any(marks.glob(f"{worker}-*")) and time.monotonic() < deadline:
            time.sleep(0.02)
        _kill_node(worker_port)
        killed.set()

    from ray_jobs import square_on_a_node

    threading.Thread(target=kill_the_worker_once_it_has_work, daemon=True).start()
    items = [(number, str(marks)) for number in range(12)]
    results = run_jobs(square_on_a_node, items, Engine("ray", address=address), "items")
    assert killed.is_set()
    assert [square for square, _ in results] == [n * n for n in range(12)]
    started_on_worker = {int(p.name.rsplit("-", 1)[1]) for p in marks.glob(f"{worker}-*")}
    retried = {number for number in started_on_worker if results[number][1] != worker}
    assert retried, (started_on_worker, results)  # begun on the worker, lost with it, finished by the head
    assert _node_processes(worker_port) == []  # the worker node is gone


def _csv_rows(folder: Path) -> tuple[list, list]:
    import csv

    tables = []
    for pattern in ("accuracy_checking_result_*.csv", "accuracy_checking_details_*.csv"):
        [path] = folder.glob(pattern)
        with open(path, encoding="utf-8-sig", newline="") as handle:
            tables.append(list(csv.DictReader(handle)))
    return tables[0], tables[1]


def test_a_split_run_ut_on_ray_equals_run_ut(cluster, tmp_path):
    import torch
    from click.testing import CliRunner

    from msprobe.cli.main import cli
    from msprobe.pytorch import PrecisionDebugger

    address, _ = cluster
    torch.manual_seed(0)
    model = torch.nn.Sequential(
        torch.nn.Linear(16, 32), torch.nn.GELU(), torch.nn.LayerNorm(32), torch.nn.Linear(32, 4)
    )
    debugger = PrecisionDebugger(task="statistics", level="L1", dump_path=str(tmp_path / "dump"), model=model)
    debugger.start()
    for _ in range(3):
        torch.softmax(model(torch.randn(8, 16)), dim=-1).log().mean().backward()
    debugger.stop()
    debugger.step()
    dump_json = tmp_path / "dump" / "step0" / "rank" / "dump.json"
    runner = CliRunner()
    single = runner.invoke(cli, ["-f", "pytorch", "run_ut", "-api_info", str(dump_json), "-o", str(tmp_path / "one")])
    on_ray = ["-n", "4", "--engine", "ray", "--ray-address", address]
    split = runner.invoke(
        cli, ["-f", "pytorch", "multi_run_ut", "-api_info", str(dump_json), "-o", str(tmp_path / "ray"), *on_ray]
    )
    assert single.exit_code == 0 and split.exit_code == 0, split.output
    one, ray_rows = _csv_rows(tmp_path / "one"), _csv_rows(tmp_path / "ray")
    assert len(one[0]) > 20 and ray_rows == one  # every API, the same verdicts and metrics, the dump's order


def test_graph_batch_and_merge_result_on_ray_equal_the_local_engines(cluster, tmp_path):
    import json

    from msprobe.core.compare.merge import merge_results
    from msprobe.core.graph.run import run_graph

    address, _ = cluster
    write_run(tmp_path / "npu", 4, 2, 6)
    write_run(tmp_path / "bench", 4, 2, 6, drift=1.01)
    spec = tmp_path / "graph.json"
    spec.write_text(json.dumps({"npu_path": str(tmp_path / "npu"), "bench_path": str(tmp_path / "bench")}))
    local = run_graph(spec, tmp_path / "graph-local", engine=Engine(workers=2))
    on_ray = run_graph(spec, tmp_path / "graph-ray", engine=Engine("ray", address=address))
    assert [s.line() for s in on_ray] == [s.line() for s in local] and len(local) == 8
    for mine, theirs in zip(on_ray, local):
        [vis_ray] = [f for f in mine.files if f.suffix == ".vis"]
        [vis_local] = [f for f in theirs.files if f.suffix == ".vis"]
        assert json.loads(vis_ray.read_text()) == json.loads(vis_local.read_text())

    compare_distributed(tmp_path / "npu" / "step1", tmp_path / "bench" / "step1", tmp_path / "results")
    config = tmp_path / "merge.yaml"
    config.write_text("api: [Functional.linear.0.forward, Functional.gelu.1.forward]\n")
    merged_local = merge_results(tmp_path / "results", tmp_path / "merged-local", config, Engine(workers=2))
    merged_ray = merge_results(tmp_path / "results", tmp_path / "merged-ray", config, Engine("ray", address=address))
    sheets_local = pd.read_excel(merged_local, sheet_name=None)
    sheets_ray = pd.read_excel(merged_ray, sheet_name=None)
    assert sheets_local.keys() == sheets_ray.keys() and "Max diff" in sheets_local
    for name, sheet in sheets_local.items():
        pd.testing.assert_frame_equal(sheets_ray[name], sheet)
    assert list(sheets_local["Max diff"].columns) == ["NPU Name", "rank0", "rank1", "rank2", "rank3"]


@pytest.mark.parametrize(
    ("address", "message"),
    [("127.0.0.1:1", "cannot reach the Ray cluster at 127.0.0.1:1"), ("nonsense", "is not host:port")],
)
def test_a_cluster_that_does_not_answer_is_one_line_at_once(tmp_path, address, message):
    from click.testing import CliRunner

    from msprobe.cli.main import cli

    write_run(tmp_path / "npu", 2, 1, 2)
    write_run(tmp_path / "bench", 2, 1, 2)
    spec = tmp_path / "compare.json"
    spec.write_text(f'{{"npu_path": "{tmp_path / "npu" / "step0"}", "bench_path": "{tmp_path / "bench" / "step0"}"}}')
    result = CliRunner().invoke(cli, ["compare", "-i", str(spec), "-o", str(tmp_path / "out"), "--engine", "ray",
                                      "--ray-address", address])  # fmt: skip
    assert result.exit_code != 0 and message in result.output, result.output  # before Ray's minutes of waiting


@pytest.mark.parametrize("auth_mode", ["disabled", "token"])
def test_a_local_cluster_works_with_ray_s_token_on_or_off(tmp_path, auth_mode):
    """--engine ray with no address starts a cluster of this machine alone; with RAY_AUTH_MODE=token (Ray 2.52
    and later) it asks for Ray's token, here one that is not the one Ray keeps in ~/.ray."""
    script = (
        "import ray\n"
        "from msprobe.core.jobs import Engine, run_jobs\n"
        "assert run_jobs(abs, [-1, -2], Engine('ray'), 'items') == [1, 2]\n"
        "print(len(ray.nodes()))\n"
        "ray.shutdown()\n"
    )
    env = {key: value for key, value in os.environ.items() if not key.startswith("RAY_")}
    env.update(RAY_USAGE_STATS_ENABLED="0", RAY_AUTH_MODE=auth_mode)
    if auth_mode == "token":
        env["RAY_AUTH_TOKEN"] = "msprobe-test-" + os.urandom(16).hex()
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=300, env=env,
                          cwd=tmp_path)  # fmt: skip
    assert done.returncode == 0, done.stderr[-3000:]
    assert done.stdout.split()[-1] == "1"


def test_a_cluster_started_for_the_run_refuses_a_stranger(tmp_path):
    """With RAY_AUTH_MODE unset, the cluster msprobe starts asks for a token of its own: another process of
    this machine, with or without Ray's token in ~/.ray, cannot join it while the run holds it; one given the
    run's token can."""
    # refused however Ray says it: a ConnectionError, or (with no token on this machine at all) its own
    # authentication error before it connects
    stranger = (
        "import ray, sys\n"
        "try:\n"
        "    ray.init(address=sys.argv[1], log_to_driver=False)\n"
        "except Exception:\n"
        "    print('refused')\n"
        "else:\n"
        "    print('joined')\n"
    )
    script = (
        "import os, subprocess, sys\n"
        "from msprobe.core.jobs import Engine, run_jobs\n"
        "assert 'ray' not in sys.modules\n"  # msprobe can ask for the token only before Ray's import
        "assert run_jobs(abs, [-3], Engine('ray'), 'items') == [3]\n"
        "import ray\n"
        "assert os.environ['RAY_AUTH_MODE'] == 'token'\n"
        "env = {k: v for k, v in os.environ.items() if not k.startswith('RAY_')}\n"
        "holder = dict(env, RAY_AUTH_TOKEN=os.environ['RAY_AUTH_TOKEN'])\n"
        "for mode, env in (('disabled', env), ('token', env), ('holder', holder)):\n"
        "    env.update(RAY_USAGE_STATS_ENABLED='0', RAY_AUTH_MODE='disabled' if mode == 'disabled' else 'token')\n"
        "    done = subprocess.run([sys.executable, '-c', sys.argv[1], ray.get_runtime_context().gcs_address],\n"
        "                          env=env, capture_output=True, text=True, timeout=200)\n"
        "    print(mode, done.stdout.strip())\n"
        "ray.shutdown()\n"
    )
    env = {key: value for key, value in os.environ.items() if not key.startswith("RAY_")}
    env["RAY_USAGE_STATS_ENABLED"] = "0"
    done = subprocess.run([sys.executable, "-c", script, stranger], capture_output=True, text=True, timeout=600,
                          env=env, cwd=tmp_path)  # fmt: skip
    assert done.returncode == 0, done.stderr[-3000:]
    # the positive control: a process given the run's token joins, so "refused" is the token's doing
    assert done.stdout.split("\n")[-4:-1] == ["disabled refused", "token refused", "holder joined"], done.stdout
