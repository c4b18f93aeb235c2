"""A MindSpore dump compared with a PyTorch dump of the same network and weights.

The PyTorch side is tests/data/cross_framework/pytorch_dump, written by this tool
(make_pytorch_dump.py there), so this session needs no torch.
"""

import json

import mindspore as ms
import numpy as np
import pytest
from mindspore import Tensor, mint, nn
from repo_paths import TEST_DATA

from msprobe.core.compare.run import compare
from msprobe.core.graph.run import run_graph
from msprobe.mindspore import PrecisionDebugger

DATA = TEST_DATA / "cross_framework"
ms.set_context(mode=ms.PYNATIVE_MODE)


class Net(nn.Cell):
    def __init__(self, activation):
        super().__init__()
        self.fc = nn.Dense(6, 8)
        self.norm = nn.LayerNorm((8,))
        self.head = nn.Dense(8, 3)
        self.activation = activation

    def construct(self, x):
        return self.head(self.activation(self.norm(self.fc(x))))


def dump(folder, activation):
    net = Net(activation)
    weights = np.load(DATA / "weights.npz")
    for name, parameter in net.parameters_and_names():
        if name in weights:
            parameter.set_data(Tensor(weights[name]))
    debugger = PrecisionDebugger(task="statistics", level="L0", dump_path=str(folder), model=net)
    debugger.start()
    net(Tensor(np.load(DATA / "input.npy")))
    debugger.stop()
    debugger.step()
    return folder / "step0" / "rank" / "dump.json"


@pytest.fixture
def mappings(tmp_path):
    (tmp_path / "cells.yaml").write_text("fc.Dense: fc.Linear\nhead.Dense: head.Linear\n")
    (tmp_path / "data.yaml").write_text(
        "Cell.norm.LayerNorm.forward.0.parameters.gamma: Module.norm.LayerNorm.forward.0.parameters.weight\n"
        "Cell.norm.LayerNorm.forward.0.parameters.beta: Module.norm.LayerNorm.forward.0.parameters.bias\n"
    )
    return {"cell_mapping": tmp_path / "cells.yaml", "data_mapping": tmp_path / "data.yaml"}


def test_same_network_compares_clean_layer_by_layer(tmp_path, mappings):
    ms_dump = dump(tmp_path / "ms", mint.nn.functional.relu)
    summary = compare(
        {"npu_json_path": str(ms_dump), "bench_json_path": str(DATA / "pytorch_dump/step0/rank/dump.json")},
        tmp_path / "out",
        mappings=mappings,
    )
    assert summary.unmatched == 0, summary.line()
    assert summary.verdict == "PASS", summary.line()


def test_an_injected_difference_is_found(tmp_path, mappings):
    ms_dump = dump(tmp_path / "ms", mint.tanh)  # the PyTorch network uses relu
    summary = compare(
        {"npu_json_path": str(ms_dump), "bench_json_path": str(DATA / "pytorch_dump/step0/rank/dump.json")},
        tmp_path / "out",
        mappings=mappings,
    )
    assert summary.verdict == "SUSPICIOUS"
    # the activation between the cells changed, and no dumped call (level L0) made head's input
    assert (summary.diagnosis.api, summary.diagnosis.cause) == ("Cell.head.Dense.forward.0", "data")
    assert "no dumped call made" in summary.diagnosis.detail


def graph_compare(tmp_path, ms_dump):
    spec = tmp_path / "compare.json"
    bench = DATA / "pytorch_dump" / "step0" / "rank"
    spec.write_text(json.dumps({"npu_path": str(ms_dump.parent), "bench_path": str(bench)}))
    [summary] = run_graph(spec, tmp_path / "graph")
    return summary, json.loads(summary.files[0].read_text())


def test_graph_pairs_cells_with_modules_across_frameworks(tmp_path):
    summary, vis = graph_compare(tmp_path, dump(tmp_path / "ms", mint.nn.functional.relu))
    assert summary.matched == summary.nodes  # Dense pairs with Linear, LayerNorm with LayerNorm
    link = vis["NPU"]["node"]["Cell.fc.Dense.forward.0"]["matched_node_link"]
    assert link[-1] == "Module.fc.Linear.forward.0"
    assert summary.suspect == 0, summary.line()


def test_graph_points_at_the_cell_after_a_changed_activation(tmp_path):
    summary, vis = graph_compare(tmp_path, dump(tmp_path / "ms", mint.tanh))
    assert summary.first_suspect == "Cell.head.Dense.forward.0"
    assert "the runs part ways at Cell.head.Dense.forward.0" in summary.line()
    assert vis["NPU"]["node"]["Cell.norm.LayerNorm.forward.0"]["data"]["precision_index"] < 0.2
