"""Our .vis files open in the reference's own viewer, the TensorBoard plugin tb-graph-ascend.

TensorBoard runs with the plugin over a folder holding our files and the
reference tool's files for the same dumps; the plugin's HTTP API must answer
the same for both.
"""

import importlib.metadata
import json
import shutil
import socket
import subprocess
import sys
import time
import urllib.request

import pytest
from repo_paths import REFERENCE_DUMPS, REFERENCE_GRAPHS

from msprobe.core.graph.run import run_graph

MIX = REFERENCE_DUMPS / "pytorch" / "statistics_mix"


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


class PluginClient:
    def __init__(self, port: int):
        self.base = f"http://127.0.0.1:{port}/data/plugin/graph_ascend"

    def get(self, path: str) -> str:
        with urllib.request.urlopen(self.base + path, timeout=30) as response:
            return response.read().decode()

    def post(self, path: str, body: dict) -> dict:
        request = urllib.request.Request(self.base + path, data=json.dumps(body).encode(), method="POST")
        with urllib.request.urlopen(request, timeout=30) as response:
            return json.loads(response.read())

    def view(self, run: str, tag: str, node: str) -> dict:
        """What the plugin's page asks for when a graph is opened and a node clicked."""
        meta = {"run": run, "tag": tag, "type": "json", "microStep": -1, "lang": "en"}
        stream = self.get(f"/loadGraphData?run={run}&tag={tag}&type=json")
        config = self.post("/loadGraphConfigInfo", {"metaData": meta})
        nodes = self.post("/loadGraphAllNodeList", {"metaData": meta})
        side = "NPU" if tag.startswith("compare") else "Single"
        info = self.post("/getNodeInfo", {"nodeInfo": {"nodeName": node, "nodeType": side}, "metaData": meta})
        return {"stream": stream, "config": config, "nodes": nodes, "info": info}


@pytest.fixture(scope="module")
def plugin(tmp_path_factory):
    try:
        importlib.metadata.distribution("tb-graph-ascend")  # it installs a top-level package called "server"
    except importlib.metadata.PackageNotFoundError:
        pytest.fail("this test needs the reference's viewer: pip install tb-graph-ascend (the nox core session does)")
    logdir = tmp_path_factory.mktemp("tb")
    (logdir / "ref").mkdir()
    shutil.copy(REFERENCE_GRAPHS / "build_statistics_mix_step0.vis", logdir / "ref" / "build_1.vis")
    shutil.copy(REFERENCE_GRAPHS / "compare_statistics_mix_step0_vs_step1.vis", logdir / "ref" / "compare_1.vis")
    specs = logdir.parent / "specs"
    specs.mkdir(exist_ok=True)
    (specs / "one.json").write_text(json.dumps({"npu_path": str(MIX / "step0" / "rank")}))
    (specs / "two.json").write_text(
        json.dumps({"npu_path": str(MIX / "step0" / "rank"), "bench_path": str(MIX / "step1" / "rank")})
    )
    [built] = run_graph(specs / "one.json", logdir / "tmp")
    [compared] = run_graph(specs / "two.json", logdir / "tmp")
    (logdir / "ours").mkdir()
    shutil.copy(built.files[0], logdir / "ours" / "build_1.vis")
    shutil.copy(compared.files[0], logdir / "ours" / "compare_1.vis")
    shutil.rmtree(logdir / "tmp")
    port = free_port()
    command = [
        sys.executable,
        "-m",
        "tensorboard.main",
        "--logdir",
        str(logdir),
        "--port",
        str(port),
        "--host",
        "127.0.0.1",
    ]
    server = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    client = PluginClient(port)
    deadline = time.monotonic() + 120
    while True:
        try:
            runs = json.loads(client.get("/load_meta_dir"))["data"]
            if {"ours", "ref"} <= set(runs):
                break
        except OSError:
            pass
        if server.poll() is not None or time.monotonic() > deadline:
            server.kill()
            pytest.fail(f"TensorBoard with tb-graph-ascend did not come up: {server.stderr.read().decode()[-2000:]}")
        time.sleep(0.5)
    yield client
    server.terminate()
    server.wait(timeout=30)


@pytest.mark.parametrize("tag", ["build_1", "compare_1"])
def test_the_reference_viewer_reads_ours_as_it_reads_the_reference(plugin, tag):
    ours = plugin.view("ours", tag, "Functional.relu.0.forward")
    reference = plugin.view("ref", tag, "Functional.relu.0.forward")
    for answer in (ours, reference):
        assert '"done": true' in answer["stream"]
        assert answer["config"]["success"] and answer["nodes"]["success"] and answer["info"]["success"], answer
    assert ours["config"]["data"]["isSingleGraph"] == reference["config"]["data"]["isSingleGraph"]
    assert ours["config"]["data"]["microSteps"] == reference["config"]["data"]["microSteps"]
    ours_lists, reference_lists = ours["nodes"]["data"], reference["nodes"]["data"]
    assert ours_lists.keys() == reference_lists.keys()
    for key, names in ours_lists.items():
        assert sorted(names) == sorted(reference_lists[key]), key  # we list nodes parents-first
    assert set(ours["info"]["data"]) == set(reference["info"]["data"])
    for side, node in ours["info"]["data"].items():
        expected = reference["info"]["data"][side]
        assert node["id"] == expected["id"] and node["subnodes"] == expected["subnodes"]
        assert set(node["output_data"]) == set(expected["output_data"])
