"""Graph view of MindSpore dumps: cells as nodes, their APIs as leaves, and a comparison of two runs."""

import json

import mindspore as ms
import numpy as np
from mindspore import Tensor, mint, nn

from msprobe.core.dump.reader import read_dump
from msprobe.core.graph.model import API, build_graph
from msprobe.core.graph.run import run_graph
from msprobe.mindspore import PrecisionDebugger

ms.set_context(mode=ms.PYNATIVE_MODE)


class Layer(nn.Cell):
    def __init__(self, inputs, outputs, seed):
        super().__init__()
        weight = np.random.default_rng(seed).standard_normal((inputs, outputs)).astype(np.float32)
        self.weight = ms.Parameter(Tensor(weight), name="weight")

    def construct(self, x):
        return mint.matmul(x, self.weight)


class Net(nn.Cell):
    def __init__(self, activation):
        super().__init__()
        self.fc = Layer(6, 8, seed=1)
        self.head = Layer(8, 3, seed=2)
        self.activation = activation

    def construct(self, x):
        return self.head(getattr(mint, self.activation)(self.fc(x)))


def dump(folder, activation):
    net = Net(activation)
    debugger = PrecisionDebugger(task="statistics", level="mix", dump_path=str(folder), model=net)
    debugger.start()
    net(Tensor(np.linspace(-2, 2, 24, dtype=np.float32).reshape(4, 6)))
    debugger.stop()
    debugger.step()
    return folder / "step0" / "rank"


def test_cells_hold_their_apis_and_a_changed_activation_is_found(tmp_path):
    npu, bench = dump(tmp_path / "npu", "tanh"), dump(tmp_path / "bench", "sigmoid")
    graph = build_graph(read_dump(npu))
    fc = graph["Cell.fc.Layer.forward.0"]
    assert fc.upnode == "DefaultModel" and fc.subnodes and all(graph[c].node_type == API for c in fc.subnodes)
    assert graph["DefaultModel"].subnodes[0] == "Cell.fc.Layer.forward.0"
    spec = tmp_path / "compare.json"
    spec.write_text(json.dumps({"npu_path": str(npu), "bench_path": str(bench)}))
    [summary] = run_graph(spec, tmp_path / "out", fuzzy_match=True)
    vis = json.loads(summary.files[0].read_text())
    assert vis["NPU"]["node"]["Cell.fc.Layer.forward.0"]["data"]["precision_index"] == 0
    [activation] = [n for n in graph.nodes if ".tanh." in n]
    assert vis["NPU"]["node"][activation]["matched_node_link"] == []  # tanh has no sigmoid partner
    assert summary.nodes - summary.matched == 1
    # the diagnosis names the changed call itself: this run calls tanh where the benchmark calls sigmoid
    assert summary.first_suspect == activation
    assert "it calls Mint.tanh where the benchmark calls Mint.sigmoid" in summary.answer
    assert vis["NPU"]["node"]["Cell.head.Layer.forward.0"]["data"]["precision_index"] > 0.2
