"""Grad probe on MindSpore: the same files as PyTorch, read by the same comparison."""

import csv
import json

import mindspore as ms
import numpy as np
import pytest
from mindspore import Tensor, nn

from msprobe.core.errors import UsageError
from msprobe.core.grad_probe import GradComparator, wait_for_writers
from msprobe.mindspore import PrecisionDebugger

ms.set_context(mode=ms.PYNATIVE_MODE)


def train(folder, level="L1", diverge_from=None, steps=5):
    ms.set_seed(0)
    net = nn.SequentialCell([nn.Dense(6, 12), nn.Tanh(), nn.Dense(12, 2)])
    optimizer = nn.SGD(net.trainable_params(), learning_rate=0.05)
    (folder.parent / f"{folder.name}.json").write_text(
        json.dumps({"task": "grad_probe", "dump_path": str(folder), "grad_probe": {"grad_level": level}})
    )
    debugger = PrecisionDebugger(config_path=str(folder.parent / f"{folder.name}.json"))
    debugger.grad_probe(optimizer)
    grad_fn = ms.value_and_grad(lambda x, y: ((net(x) - y) ** 2).mean(), None, optimizer.parameters)
    rng = np.random.default_rng(3)
    last = None
    for step in range(steps):
        x = Tensor(rng.standard_normal((16, 6)).astype(np.float32))
        y = rng.standard_normal((16, 2)).astype(np.float32)
        if diverge_from is not None and step >= diverge_from:
            y = -y
        _, grads = grad_fn(x, Tensor(y))
        last = grads
        optimizer(grads)
        debugger.step()
    wait_for_writers()  # the last step's direction files are written while training would go on
    return optimizer, last


def test_summaries_and_values(tmp_path):
    optimizer, grads = train(tmp_path / "run", level="L2")
    with open(tmp_path / "run" / "rank0" / "grad_summary_4.csv") as handle:
        rows = list(csv.DictReader(handle))
    names = [p.name for p in optimizer.parameters]
    assert [row["Param_name"] for row in rows] == names
    first = grads[0].asnumpy()
    assert float(rows[0]["Max"]) == pytest.approx(first.max(), rel=1e-5)
    assert float(rows[0]["Norm"]) == pytest.approx(np.linalg.norm(first), rel=1e-5)
    assert (tmp_path / "run" / "rank0" / "step4" / f"{names[0]}.npy").exists()


def test_two_runs_differing_from_step_2_name_step_2(tmp_path):
    train(tmp_path / "a")
    train(tmp_path / "b", diverge_from=2)
    (result,) = GradComparator.compare_distributed(tmp_path / "a", tmp_path / "b", tmp_path / "out")
    assert result.first_bad_step == 2


def test_monitor_needs_an_optimizer(tmp_path):
    (tmp_path / "c.json").write_text(json.dumps({"task": "grad_probe", "dump_path": str(tmp_path)}))
    with pytest.raises(UsageError, match="mindspore.nn.Optimizer"):
        PrecisionDebugger(config_path=str(tmp_path / "c.json")).monitor(nn.Dense(1, 1))
