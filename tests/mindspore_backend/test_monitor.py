"""TrainerMon on MindSpore: the same files and rules as on PyTorch."""

import json
import time

import mindspore as ms
import numpy as np
import pytest
from mindspore import Tensor, nn
from result_tables import csv_rows, tensorboard_scalars

from msprobe.mindspore import TrainerMon

ms.set_context(mode=ms.PYNATIVE_MODE)


def run(tmp_path, monkeypatch, config, steps=5, spike_at=None):
    monkeypatch.setenv("MONITOR_OUTPUT_DIR", str(tmp_path / "out"))
    (tmp_path / "m.json").write_text(json.dumps(config))
    ms.set_seed(0)
    net = nn.SequentialCell([nn.Dense(6, 12), nn.Tanh(), nn.Dense(12, 2)])
    optimizer = nn.Adam(net.trainable_params(), learning_rate=1e-2)
    monitor = TrainerMon(str(tmp_path / "m.json")).set_monitor(net, optimizer=optimizer)
    grad_fn = ms.value_and_grad(lambda x, y: ((net(x) - y) ** 2).mean(), None, optimizer.parameters)
    rng = np.random.default_rng(0)
    seen = []
    for step in range(steps):
        x = rng.standard_normal((16, 6)).astype(np.float32)
        if step == spike_at:
            x = x * 1000
        _, grads = grad_fn(Tensor(x), Tensor(np.zeros((16, 2), np.float32)))
        seen.append([g.asnumpy() for g in grads])
        optimizer(grads)
    monitor.finish()
    (folder,) = list((tmp_path / "out").iterdir())
    return folder, seen, optimizer


def test_gradients_state_and_activations(tmp_path, monkeypatch):
    folder, seen, optimizer = run(
        tmp_path,
        monkeypatch,
        {
            "wg_distribution": True,
            "mv_distribution": True,
            "xy_distribution": True,
            "all_xy": True,
            "ops": ["min", "max", "norm"],
        },
    )
    rows = csv_rows(folder / "grad_reduced_1-1.csv")
    first = optimizer.parameters[0].name
    row = next(r for r in rows if r["name"] == first)
    assert float(row["norm"]) == pytest.approx(float(np.linalg.norm(seen[1][0])), rel=1e-5)
    unreduced = next(r for r in csv_rows(folder / "grad_unreduced_1-1.csv") if r["name"] == first)
    assert unreduced["norm"] == row["norm"]  # one process: nothing was reduced
    assert (folder / "exp_avg_3-3.csv").exists() and (folder / "exp_avg_sq_3-3.csv").exists()
    assert {r["name"] for r in csv_rows(folder / "actv_0-0.csv")} >= {"0.input", "2.output"}


def test_a_spike_is_reported_at_its_step(tmp_path, monkeypatch):
    config = {
        "wg_distribution": True,
        "ops": ["norm"],
        "alert": {"rules": [{"rule_name": "AnomalyTurbulence", "args": {"threshold": 3.0}}]},
    }
    folder, _, _ = run(tmp_path, monkeypatch, config, steps=5, spike_at=3)
    anomalies = [json.loads(line) for line in (folder / "anomalies.jsonl").read_text().splitlines()]
    assert min(a["step"] for a in anomalies) == 3


def test_tensorboard_format(tmp_path, monkeypatch):
    config = {"wg_distribution": True, "format": "tensorboard", "ops": ["norm"]}
    folder, seen, optimizer = run(tmp_path, monkeypatch, config, steps=3)
    first = optimizer.parameters[0].name
    norms = tensorboard_scalars(folder)[f"0:{first}/rank0/grad_reduced_norm"]
    assert sorted(norms) == [0, 1, 2]
    assert norms[2] == pytest.approx(float(np.linalg.norm(seen[2][0])), rel=1e-5)


def test_activation_gradients(tmp_path, monkeypatch):
    config = {"xy_distribution": True, "all_xy": True, "ops": ["norm"]}
    folder, _, _ = run(tmp_path, monkeypatch, config, steps=2)
    outputs = {r["name"]: float(r["norm"]) for r in csv_rows(folder / "actv_1-1.csv")}
    grads = {r["name"]: float(r["norm"]) for r in csv_rows(folder / "actv_grad_1-1.csv")}
    # loss = mean(out ** 2) over 16 x 2 values, so d loss / d out = out / 16
    assert grads["2.output_grad"] == pytest.approx(outputs["2.output"] / 16, rel=1e-5)
    assert "0.output_grad" in grads and "0.input_grad" not in grads  # the data needs no gradient


def test_update_and_ratio_of_adam(tmp_path, monkeypatch):
    monkeypatch.setenv("MONITOR_OUTPUT_DIR", str(tmp_path / "out"))
    (tmp_path / "m.json").write_text(json.dumps({"ur_distribution": True, "ops": ["norm"], "targets": {"0.": {}}}))
    net = nn.SequentialCell([nn.Dense(6, 12), nn.Tanh(), nn.Dense(12, 2)])
    optimizer = nn.Adam(net.trainable_params(), learning_rate=1e-2)
    monitor = TrainerMon(str(tmp_path / "m.json")).set_monitor(net, optimizer=optimizer)
    grad_fn = ms.value_and_grad(lambda x: (net(x) ** 2).mean(), None, optimizer.parameters)
    expected = []
    for _ in range(2):
        _, grads = grad_fn(Tensor(np.random.default_rng(1).standard_normal((8, 6)).astype(np.float32)))
        optimizer(grads)
        moment = optimizer.moment1[0].asnumpy() / (1 - float(optimizer.beta1_power.asnumpy()))
        root = np.sqrt(optimizer.moment2[0].asnumpy() / (1 - float(optimizer.beta2_power.asnumpy())))
        expected.append(np.linalg.norm(moment / (root + 1e-8)))
    monitor.finish()
    (folder,) = list((tmp_path / "out").iterdir())
    first = optimizer.parameters[0].name
    for step, norm in enumerate(expected):
        rows = csv_rows(folder / f"update_{step}-{step}.csv")
        assert {r["name"] for r in rows} == {"0.weight", "0.bias"}  # targets pick the weights
        assert float(next(r for r in rows if r["name"] == first)["norm"]) == pytest.approx(float(norm), rel=1e-4)
        assert csv_rows(folder / f"ratio_{step}-{step}.csv")


def test_dynamic_start_and_stop(tmp_path, monkeypatch):
    monkeypatch.setenv("MONITOR_OUTPUT_DIR", str(tmp_path / "out"))
    monkeypatch.setenv("DYNAMIC_MONITOR", "True")
    path = tmp_path / "monitor.json"
    config = {"wg_distribution": True, "ops": ["norm"], "dynamic_on": False, "collect_times": 2}
    path.write_text(json.dumps(config))
    net = nn.Dense(6, 2)
    optimizer = nn.SGD(net.trainable_params(), learning_rate=0.1)
    monitor = TrainerMon(str(path)).set_monitor(net, optimizer=optimizer)
    grad_fn = ms.value_and_grad(lambda x: net(x).sum(), None, optimizer.parameters)
    for step in range(8):
        if step == 3:  # the user turns it on while training runs
            time.sleep(0.01)
            path.write_text(json.dumps({**config, "dynamic_on": True}))
        _, grads = grad_fn(Tensor(np.ones((4, 6), np.float32)))
        optimizer(grads)
    monitor.finish()
    (folder,) = list((tmp_path / "out").iterdir())
    steps = sorted({int(r["step"]) for f in folder.glob("grad_reduced_*.csv") for r in csv_rows(f)})
    assert steps == [3, 4]
    assert json.loads(path.read_text())["dynamic_on"] is False  # switched itself off after collect_times
