"""The MindSpore dump reuses a tensor's statistics only while no write it can see has happened."""

import json

import mindspore as ms
import numpy as np
import pytest
from mindspore import Tensor, mint, nn, ops

from msprobe.core.dump.reader import read_dump
from msprobe.mindspore import PrecisionDebugger
from msprobe.mindspore.dump import tensors

ms.set_context(mode=ms.PYNATIVE_MODE)


def _dump(tmp_path, body, level="L1", model=None):
    config = {"task": "statistics", "level": level, "dump_path": str(tmp_path / "dump")}
    (tmp_path / "c.json").write_text(json.dumps(config))
    debugger = PrecisionDebugger(config_path=str(tmp_path / "c.json"), model=model)
    debugger.start()
    body()
    debugger.stop()
    debugger.step()
    return read_dump(tmp_path / "dump" / "step0" / "rank" / "dump.json").data


def _count_measures(monkeypatch):
    calls = []
    real = tensors.measure

    def counting(tensor, *args):
        calls.append(tensor)
        return real(tensor, *args)

    monkeypatch.setattr(tensors, "measure", counting)
    return calls


def test_an_output_is_measured_once_when_the_next_call_takes_it(tmp_path, monkeypatch):
    calls = _count_measures(monkeypatch)
    x = Tensor(np.array([1.0, -2.0, 3.0], np.float32))

    def body():
        y = mint.abs(x)
        mint.neg(y)

    data = _dump(tmp_path, body)
    assert len(calls) == 3  # x, y (as abs's output, reused as neg's input), neg's output
    assert data["Mint.neg.0.forward"]["input_args"][0]["Max"] == 3.0


@pytest.mark.parametrize(
    "write",
    [
        pytest.param(lambda y: ops.assign(y, Tensor(np.full(3, 7.0, np.float32))), id="listed-assign"),
        pytest.param(lambda y: y.copy_(Tensor(np.full(3, 7.0, np.float32))), id="unlisted-method"),
        pytest.param(lambda y: y.assign_value(Tensor(np.full(3, 7.0, np.float32))), id="assign_value"),
        pytest.param(lambda y: y.__setitem__(0, 7.0), id="setitem"),
    ],
)
def test_a_write_the_dump_sees_makes_it_measure_again(tmp_path, write):
    x = Tensor(np.array([1.0, -1.0, 1.0], np.float32))

    def body():
        y = mint.abs(x)  # all ones: measured as abs's output
        write(y)
        mint.neg(y)

    data = _dump(tmp_path, body)
    after = data["Mint.neg.0.forward"]["input_args"][0]
    assert after["Max"] == 7.0  # not the cached 1.0


def test_parameters_are_measured_every_time(tmp_path, monkeypatch):
    weight = ms.Parameter(Tensor(np.ones(3, np.float32)), name="w")

    def body():
        mint.neg(weight)
        weight.set_data(Tensor(np.full(3, 5.0, np.float32)))  # optimizers write like this, unseen
        mint.neg(weight)

    data = _dump(tmp_path, body)
    assert data["Mint.neg.0.forward"]["input_args"][0]["Max"] == 1.0
    assert data["Mint.neg.1.forward"]["input_args"][0]["Max"] == 5.0


def test_at_l0_a_written_cell_output_is_measured_as_written(tmp_path):
    class Scale(nn.Cell):
        def construct(self, x):
            return x * 1.0

    class Two(nn.Cell):
        def __init__(self):
            super().__init__()
            self.first, self.second = Scale(), nn.ReLU()

        def construct(self, x):
            y = self.first(x)
            y.copy_(Tensor(np.full(3, 9.0, np.float32)))  # no entry at L0, but it writes what the next cell reads
            return self.second(y)

    net = Two()
    data = _dump(tmp_path, lambda: net(Tensor(np.ones(3, np.float32))), level="L0", model=net)
    assert data["Cell.second.ReLU.forward.0"]["input_args"][0]["Max"] == 9.0


def test_a_debug_save_never_reuses_values(tmp_path):
    config = {"task": "statistics", "level": "debug", "dump_path": str(tmp_path / "dump")}
    (tmp_path / "c.json").write_text(json.dumps(config))
    debugger = PrecisionDebugger(config_path=str(tmp_path / "c.json"))
    values = Tensor(np.ones(3, np.float32))
    debugger.save(values, "v")
    values.assign_value(Tensor(np.full(3, 4.0, np.float32)))
    debugger.save(values, "v")
    debugger.step()
    data = read_dump(tmp_path / "dump" / "step0" / "rank" / "debug.json").data
    assert [entry["Max"] for name, entry in data.items()] == [1.0, 4.0]


def test_at_l0_the_listed_writers_are_watched():
    from msprobe.mindspore.dump.recorder import _undumped_writers

    l0 = {key for _owner, _name, key in _undumped_writers("L0")}
    l1 = {key for _owner, _name, key in _undumped_writers("L1")}
    assert {"Functional.assign", "Tensor.copy_", "Tensor.__setitem__"} <= l0
    assert "Functional.assign" not in l1 and "Tensor.copy_" in l1  # at L1 the listed ones are recorded instead


def test_the_summarizer_keeps_the_core_s_contract():
    from msprobe.core.dump.summarizer import TensorSummarizer as Contract

    for task in ("statistics", "tensor", "overflow_check"):
        summarizer = tensors.TensorSummarizer(task, "statistics", caches=True)
        assert isinstance(summarizer, Contract), task
        assert summarizer.caches
    assert not tensors.TensorSummarizer("structure", "statistics", caches=True).caches  # nothing to reuse
