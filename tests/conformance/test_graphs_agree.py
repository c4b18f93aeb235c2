"""`msprobe graph` against the reference's graph builder on the zoo: the same nodes, tree and matches.

Statistics-mode precision_index differs on purpose (see docs/graph.md and docs/differences.md): ours
measures a statistic smaller than the tensor's RMS against the RMS.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import reference_python

# mix only: of an L1 dump (no construct.json) the reference's builder makes an empty tree, ours a tree of API groups
PAIRS = [("cnn", "statistics", "mix"), ("recurrent", "statistics", "mix")]


def _graph(msprobe: list[str], npu: Path, bench: Path, out: Path) -> dict:
    out.mkdir(parents=True)
    config = out / "graph.json"
    config.write_text(json.dumps({"npu_path": str(npu), "bench_path": str(bench), "is_print_compare_log": False}))
    command = [*msprobe, "-f", "pytorch", "graph", "-i", str(config), "-o", str(out)]
    run = subprocess.run(command, capture_output=True, text=True, timeout=600)
    files = sorted(out.glob("*.vis"))
    assert files, f"{command[0]} wrote no .vis (exit {run.returncode}):\n{run.stdout[-2000:]}{run.stderr[-2000:]}"
    return json.loads(files[0].read_text())


@pytest.mark.parametrize(("model", "task", "level"), PAIRS, ids=["-".join(pair) for pair in PAIRS])
def test_our_graph_has_the_references_nodes_tree_and_matches(dumps, tmp_path, model, task, level):
    _ours, reference = dumps(model, task, level)
    npu, bench = reference / "step0" / "rank", reference / "step1" / "rank"
    theirs = _graph([str(Path(reference_python()).with_name("msprobe"))], npu, bench, tmp_path / "reference")
    ours = _graph([str(Path(sys.executable).with_name("msprobe"))], npu, bench, tmp_path / "ours")
    for side in ("NPU", "Bench"):
        mine, reference_nodes = ours[side]["node"], theirs[side]["node"]
        assert ours[side]["root"] == theirs[side]["root"]
        assert set(mine) == set(reference_nodes), (sorted(set(mine) ^ set(reference_nodes)))[:10]
        for name, node in reference_nodes.items():
            assert mine[name]["subnodes"] == node["subnodes"], name
            assert mine[name]["upnode"] == node["upnode"], name
            assert mine[name]["node_type"] == node["node_type"], name
            assert mine[name].get("matched_node_link") == node.get("matched_node_link"), name
