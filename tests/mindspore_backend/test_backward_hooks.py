"""Gradient hooks on call outputs are attached when backward starts, and give the entries they gave attached at once."""

import json

import mindspore as ms
import numpy as np
import pytest
from mindspore import Tensor, mint, nn
from mindspore.train import Model

from msprobe.core.dump.reader import read_dump
from msprobe.mindspore import PrecisionDebugger
from msprobe.mindspore.common.utils import MsprobeStep
from msprobe.mindspore.dump import recorder

ms.set_context(mode=ms.PYNATIVE_MODE)


class Net(nn.Cell):
    def __init__(self):
        super().__init__()
        self.fc = nn.Dense(6, 5)
        self.norm = nn.LayerNorm((5,))
        self.head = nn.Dense(5, 2)

    def construct(self, x):
        h = mint.nn.functional.relu(self.norm(self.fc(x)))
        return self.head(mint.tanh(h.transpose(1, 0)).transpose(1, 0))


def _debugger(tmp_path, name, level, net):
    config = {"task": "statistics", "level": level, "dump_path": str(tmp_path / name)}
    (tmp_path / f"{name}.json").write_text(json.dumps(config))
    return PrecisionDebugger(config_path=str(tmp_path / f"{name}.json"), model=net)


def _data(tmp_path, name, step=0):
    return read_dump(tmp_path / name / f"step{step}" / "rank" / "dump.json").data


def _batch(rng):
    return Tensor(rng.standard_normal((4, 6)).astype(np.float32)), Tensor(np.zeros((4, 2), np.float32))


def _value_and_grad(tmp_path, name, level, steps=2):
    ms.set_seed(0)
    net = Net()
    optimizer = nn.SGD(net.trainable_params(), learning_rate=0.1)
    debugger = _debugger(tmp_path, name, level, net)
    grad_fn = ms.value_and_grad(lambda x, y: ((net(x) - y) ** 2).mean(), None, optimizer.parameters)
    rng = np.random.default_rng(1)
    for _ in range(steps):
        debugger.start()
        _loss, grads = grad_fn(*_batch(rng))
        optimizer(grads)
        debugger.stop()
        debugger.step()


def _model_train(tmp_path, name, level):
    ms.set_seed(0)
    net = Net()
    debugger = _debugger(tmp_path, name, level, net)
    model = Model(net, nn.MSELoss(), nn.SGD(net.trainable_params(), learning_rate=0.1))
    rng = np.random.default_rng(1)
    batches = [tuple(t.asnumpy() for t in _batch(rng)) for _ in range(2)]
    dataset = ms.dataset.GeneratorDataset(batches, ["x", "y"], shuffle=False)
    model.train(1, dataset, callbacks=[MsprobeStep(debugger)], dataset_sink_mode=False)


def _attach_at_once(monkeypatch):
    monkeypatch.setattr(recorder, "_pynative_executor", lambda: None)


@pytest.mark.parametrize("level", ["L0", "L1", "mix"])
@pytest.mark.parametrize("run", [_value_and_grad, _model_train], ids=["value_and_grad", "Model.train"])
def test_entries_are_those_of_hooks_attached_at_once(tmp_path, monkeypatch, level, run):
    run(tmp_path, "late", level)
    with monkeypatch.context() as patch:
        _attach_at_once(patch)
        run(tmp_path, "at_once", level)
    for step in (0, 1) if run is _value_and_grad else (0,):
        late, at_once = _data(tmp_path, "late", step), _data(tmp_path, "at_once", step)
        assert list(late) == list(at_once)
        assert late == at_once
        backward = [name for name in late if ".backward" in name]
        assert backward and all(late[name]["input"] for name in backward)  # arriving gradients were seen


def test_no_hook_is_attached_while_the_forward_runs(tmp_path, monkeypatch):
    events = []
    attach = ms.Tensor.register_hook

    def noting(tensor, hook):
        events.append("hook")
        return attach(tensor, hook)

    monkeypatch.setattr(ms.Tensor, "register_hook", noting)
    ms.set_seed(0)
    net = Net()
    debugger = _debugger(tmp_path, "d", "L1", net)
    grad_fn = ms.value_and_grad(lambda x, y: ((net(x) - y) ** 2).mean(), None, net.trainable_params())
    x, y = _batch(np.random.default_rng(1))
    debugger.start()
    net(x)  # a forward alone: its outputs wait
    assert events == []
    grad_fn(x, y)
    assert events  # attached when backward started
    debugger.stop()
    debugger.step()
    assert "Mint.tanh.1.backward" in _data(tmp_path, "d")


def test_outputs_of_a_forward_without_backward_are_let_go_at_the_step(tmp_path):
    ms.set_seed(0)
    net = Net()
    debugger = _debugger(tmp_path, "d", "L1", net)
    x, _y = _batch(np.random.default_rng(1))
    debugger.start()
    net(x)
    dump = _recorder_of(debugger)
    assert dump._unhooked
    debugger.stop()
    debugger.step()
    assert not dump._unhooked
    assert "Mint.tanh.0.forward" in _data(tmp_path, "d")


def test_many_waiting_outputs_are_attached_without_waiting_for_backward(tmp_path, monkeypatch):
    monkeypatch.setattr(recorder, "_MOST_UNHOOKED", 3)
    _value_and_grad(tmp_path, "few", "L1", steps=1)
    monkeypatch.setattr(recorder, "_MOST_UNHOOKED", 4096)
    _value_and_grad(tmp_path, "many", "L1", steps=1)
    assert _data(tmp_path, "few") == _data(tmp_path, "many")


def test_backward_is_watched_only_while_dumping(tmp_path):
    executor = recorder._pynative_executor()
    assert executor is not None  # this MindSpore has the class the watch wraps
    plain = executor.grad
    ms.set_seed(0)
    net = Net()
    debugger = _debugger(tmp_path, "d", "L1", net)
    debugger.start()
    assert executor.grad is not plain
    debugger.stop()
    assert executor.grad is plain
    debugger.step()


def _recorder_of(debugger):
    hooks = debugger._hooks
    assert isinstance(hooks, recorder.MindSporeDumpRecorder)
    return hooks


def test_a_hook_that_cannot_be_attached_is_logged_and_backward_runs(tmp_path, monkeypatch, caplog):
    def refuse(tensor, hook):
        raise RuntimeError("simulated register_hook failure")

    ms.set_seed(0)
    net = Net()
    grad_fn = ms.value_and_grad(lambda x, y: ((net(x) - y) ** 2).mean(), None, net.trainable_params())
    x, y = _batch(np.random.default_rng(1))
    expected_loss, expected_grads = grad_fn(x, y)
    debugger = _debugger(tmp_path, "d", "L1", net)
    monkeypatch.setattr(ms.Tensor, "register_hook", refuse)
    debugger.start()
    loss, grads = grad_fn(x, y)
    debugger.stop()
    debugger.step()
    assert float(loss.asnumpy()) == float(expected_loss.asnumpy())
    assert all(np.array_equal(a.asnumpy(), b.asnumpy()) for a, b in zip(grads, expected_grads))
    assert "simulated register_hook failure" in caplog.text
    assert caplog.text.count("Mint.tanh") <= 1  # once per API
    assert "Mint.tanh.0.forward" in _data(tmp_path, "d")
