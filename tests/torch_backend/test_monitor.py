"""TrainerMon: statistics of gradients, optimizer state, weights and activations over a training run."""

import json
import time

import pytest
import torch
from result_tables import csv_rows, tensorboard_scalars

from msprobe.core.errors import ConfigError
from msprobe.pytorch import TrainerMon


def model_and_optimizer():
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.ReLU(), torch.nn.Linear(16, 2))
    return model, torch.optim.AdamW(model.parameters(), lr=1e-2)


def run(tmp_path, monkeypatch, config, steps=6, spike_at=None, grad_acc_steps=1):
    monkeypatch.setenv("MONITOR_OUTPUT_DIR", str(tmp_path / "out"))
    (tmp_path / "monitor.json").write_text(json.dumps(config))
    model, optimizer = model_and_optimizer()
    monitor = TrainerMon(str(tmp_path / "monitor.json"), params_have_main_grad=False)
    monitor.set_monitor(model, grad_acc_steps=grad_acc_steps, optimizer=optimizer)
    generator = torch.Generator().manual_seed(1)
    seen = []
    for step in range(steps):
        x = torch.randn(32, 8, generator=generator)
        y = torch.randn(32, 2, generator=generator)
        loss = torch.nn.functional.mse_loss(model(x), y)
        if step == spike_at:
            loss = loss * 1000  # a gradient spike
        loss.backward()
        seen.append({name: p.grad.detach().clone() for name, p in model.named_parameters()})
        optimizer.step()
        optimizer.zero_grad()
    monitor.finish()
    (folder,) = list((tmp_path / "out").iterdir())
    return folder, seen, monitor


def test_weight_gradients_match_the_tensors(tmp_path, monkeypatch):
    folder, seen, _ = run(
        tmp_path,
        monkeypatch,
        {"wg_distribution": True, "ops": ["min", "max", "norm", "mean", "zeros", "nans", "std", "amax"]},
    )
    rows = csv_rows(folder / "grad_reduced_2-2.csv")
    assert list(rows[0]) == ["vpp_stage", "name", "step", "min", "max", "norm", "mean", "zeros", "nans", "std", "amax"]
    row = next(r for r in rows if r["name"] == "0.weight")
    grad = seen[2]["0.weight"]
    for op, value in (
        ("min", grad.min()),
        ("max", grad.max()),
        ("norm", grad.norm()),
        ("mean", grad.mean()),
        ("std", grad.std()),
        ("amax", grad.abs().max()),
    ):
        assert float(row[op]) == pytest.approx(value.item(), abs=1e-6)
    assert float(row["nans"]) == 0


def test_optimizer_state_weights_and_activations(tmp_path, monkeypatch):
    folder, _, monitor = run(
        tmp_path,
        monkeypatch,
        {
            "mv_distribution": True,
            "param_distribution": True,
            "xy_distribution": True,
            "all_xy": True,
            "ops": ["norm", "max"],
        },
    )
    names = {p.name.split("_")[0] for p in folder.glob("*.csv")}
    assert {"exp", "param", "actv"} <= names
    assert (folder / "exp_avg_sq_5-5.csv").exists()
    actv = csv_rows(folder / "actv_0-0.csv")
    assert {r["name"] for r in actv} >= {"0.input", "0.output", "2.output"} and "micro_step" in actv[0]
    assert set(monitor.generate_mv_metrics()) == {"exp_avg", "exp_avg_sq"}
    actv, actv_grad = monitor.generate_xy_metrics()
    assert "2.output" in actv and "2.output_grad" in actv_grad


def test_schedule_and_records_per_file(tmp_path, monkeypatch):
    folder, _, _ = run(
        tmp_path,
        monkeypatch,
        {"wg_distribution": True, "start_step": 1, "step_interval": 2, "collect_times": 2, "step_count_per_record": 2},
        steps=8,
    )
    files = sorted(p.name for p in folder.glob("grad_reduced_*.csv"))
    assert files == ["grad_reduced_1-3.csv"]
    assert sorted({r["step"] for r in csv_rows(folder / files[0])}) == ["1", "3"]


def test_a_spike_is_reported_at_its_step_and_not_before(tmp_path, monkeypatch):
    config = {
        "wg_distribution": True,
        "ops": ["norm"],
        "alert": {"rules": [{"rule_name": "AnomalyTurbulence", "args": {"threshold": 3.0}}], "dump": True},
    }
    folder, _, _ = run(tmp_path, monkeypatch, config, steps=6, spike_at=4)
    anomalies = [json.loads(line) for line in (folder / "anomalies.jsonl").read_text().splitlines()]
    assert min(a["step"] for a in anomalies) == 4
    assert list(folder.glob("anomaly_step4_*.pt"))


def test_api_format_writes_no_files(tmp_path, monkeypatch):
    folder, seen, monitor = run(tmp_path, monkeypatch, {"wg_distribution": True, "format": "api", "ops": ["max"]})
    assert not list(folder.glob("*.csv"))
    reduced, unreduced = monitor.generate_wgrad_metrics()
    assert reduced["2.bias"]["max"] == pytest.approx(seen[-1]["2.bias"].max().item())
    assert unreduced["2.bias"]["max"] == pytest.approx(reduced["2.bias"]["max"])  # one process: nothing to reduce


@pytest.mark.parametrize(
    "config, message",
    [
        ({"ops": ["median"]}, "ops: unknown op"),
        ({"bogus": 1}, "bogus: unknown key"),
        ({"step_interval": 0}, "step_interval"),
    ],
)
def test_bad_monitor_configs(tmp_path, config, message):
    (tmp_path / "m.json").write_text(json.dumps(config))
    with pytest.raises(ConfigError, match=message):
        TrainerMon(str(tmp_path / "m.json"))


def test_dynamic_start_and_stop(tmp_path, monkeypatch):
    monkeypatch.setenv("MONITOR_OUTPUT_DIR", str(tmp_path / "out"))
    monkeypatch.setenv("DYNAMIC_MONITOR", "True")
    path = tmp_path / "monitor.json"
    path.write_text(json.dumps({"wg_distribution": True, "ops": ["norm"], "dynamic_on": False, "collect_times": 2}))
    model, optimizer = model_and_optimizer()
    monitor = TrainerMon(str(path), params_have_main_grad=False).set_monitor(model, optimizer=optimizer)
    for step in range(8):
        if step == 3:  # the user turns it on while training runs
            time.sleep(0.01)
            path.write_text(
                json.dumps({"wg_distribution": True, "ops": ["norm"], "dynamic_on": True, "collect_times": 2})
            )
        model(torch.randn(4, 8)).sum().backward()
        optimizer.step()
        optimizer.zero_grad()
    monitor.finish()
    (folder,) = list((tmp_path / "out").iterdir())
    steps = sorted({int(r["step"]) for f in folder.glob("grad_reduced_*.csv") for r in csv_rows(f)})
    assert steps == [3, 4]
    assert json.loads(path.read_text())["dynamic_on"] is False  # switched itself off after collect_times


def test_tensorboard_format_matches_the_tensors(tmp_path, monkeypatch):
    config = {"wg_distribution": True, "xy_distribution": True, "format": "tensorboard", "ops": ["norm", "max"]}
    folder, seen, _ = run(tmp_path, monkeypatch, config, steps=3)
    assert not list(folder.glob("*.csv"))
    scalars = tensorboard_scalars(folder)
    norms = scalars["0:0.weight/rank0/grad_reduced_norm"]
    assert sorted(norms) == [0, 1, 2]
    for step in range(3):
        assert norms[step] == pytest.approx(seen[step]["0.weight"].norm().item(), rel=1e-5)
    assert "0:0.output:0/rank0/actv_max" in scalars


def test_csv2tb_converts_a_csv_run(tmp_path, monkeypatch):
    from msprobe.pytorch.monitor.csv2tb import csv2tensorboard_by_step

    config = {"wg_distribution": True, "mv_distribution": True, "ops": ["norm", "min"]}
    folder, seen, _ = run(tmp_path, monkeypatch, config, steps=3)
    run_time = folder.name.split("-rank")[0]
    output = csv2tensorboard_by_step(
        tmp_path / "out", run_time, run_time, data_type_list=["grad_reduced"], output_dirpath=tmp_path / "tb"
    )
    scalars = tensorboard_scalars(output / folder.name)
    assert all("/grad_reduced_" in tag for tag in scalars)  # exp_avg was left out as asked
    for step in range(3):
        expected = seen[step]["2.weight"].norm().item()
        assert scalars["0:2.weight/rank0/grad_reduced_norm"][step] == pytest.approx(expected, rel=1e-5)


def test_activation_gradients_match_autograd(tmp_path, monkeypatch):
    monkeypatch.setenv("MONITOR_OUTPUT_DIR", str(tmp_path / "out"))
    (tmp_path / "m.json").write_text(json.dumps({"xy_distribution": True, "all_xy": True, "ops": ["norm"]}))
    model, optimizer = model_and_optimizer()
    model[1] = torch.nn.ReLU(inplace=True)  # in-place ops must keep working under the hooks
    monitor = TrainerMon(str(tmp_path / "m.json"), params_have_main_grad=False)
    monitor.set_monitor(model, grad_acc_steps=2, optimizer=optimizer)
    generator = torch.Generator().manual_seed(3)
    expected = {}
    for micro_step in range(2):  # two micro-batches accumulate into one optimizer step
        x = torch.randn(4, 8, generator=generator)
        hidden = model[0](x)
        hidden.retain_grad()
        out = model[2](model[1](hidden.clone()))
        out.retain_grad()
        out.sum().backward()
        expected[micro_step] = (hidden.grad.norm().item(), out.grad.norm().item())
    optimizer.step()
    monitor.finish()
    (folder,) = list((tmp_path / "out").iterdir())
    rows = {(r["name"], int(r["micro_step"])): float(r["norm"]) for r in csv_rows(folder / "actv_grad_0-0.csv")}
    for micro_step, (hidden_norm, out_norm) in expected.items():
        assert rows[("0.output_grad", micro_step)] == pytest.approx(hidden_norm, rel=1e-5)
        assert rows[("2.output_grad", micro_step)] == pytest.approx(out_norm, rel=1e-5)
    forward = {(r["name"], r["micro_step"]) for r in csv_rows(folder / "actv_0-0.csv")}
    assert {("0.input", "0"), ("0.input", "1")} <= forward  # one row per micro-batch, all in step 0


def test_a_bad_dynamic_edit_keeps_training_and_the_next_good_one_counts(tmp_path, monkeypatch, caplog):
    monkeypatch.setenv("MONITOR_OUTPUT_DIR", str(tmp_path / "out"))
    monkeypatch.setenv("DYNAMIC_MONITOR", "True")
    path = tmp_path / "monitor.json"
    good = {"wg_distribution": True, "ops": ["norm"], "dynamic_on": True, "collect_times": 1}
    path.write_text(json.dumps({**good, "dynamic_on": False}))
    model, optimizer = model_and_optimizer()
    monitor = TrainerMon(str(path), params_have_main_grad=False).set_monitor(model, optimizer=optimizer)
    for step in range(6):
        if step in (2, 4):
            time.sleep(0.01)
            path.write_text('{"wg_distribution": true, "dynamic_on": tru' if step == 2 else json.dumps(good))
        model(torch.randn(4, 8)).sum().backward()
        optimizer.step()
        optimizer.zero_grad()
    monitor.finish()
    (folder,) = list((tmp_path / "out").iterdir())
    assert sorted({int(r["step"]) for f in folder.glob("grad_reduced_*.csv") for r in csv_rows(f)}) == [4]
    assert "keeping the current settings" in caplog.text


def test_unreduced_gradients_sum_the_micro_batches(tmp_path, monkeypatch):
    folder, seen, monitor = run(tmp_path, monkeypatch, {"wg_distribution": True, "ops": ["norm"]}, grad_acc_steps=2)
    # run() does one backward per optimizer step; a second micro-batch is added here by hand
    monkeypatch.setenv("MONITOR_OUTPUT_DIR", str(tmp_path / "acc"))
    (tmp_path / "acc.json").write_text(json.dumps({"wg_distribution": True, "ops": ["norm"]}))
    model, optimizer = model_and_optimizer()
    monitor = TrainerMon(str(tmp_path / "acc.json"), params_have_main_grad=False)
    monitor.set_monitor(model, grad_acc_steps=2, optimizer=optimizer)
    for _ in range(2):
        model(torch.randn(4, 8)).sum().backward()
    expected = model[0].weight.grad.norm().item()
    optimizer.step()
    monitor.finish()
    (acc_folder,) = list((tmp_path / "acc").iterdir())
    unreduced = {r["name"]: float(r["norm"]) for r in csv_rows(acc_folder / "grad_unreduced_0-0.csv")}
    assert unreduced["0.weight"] == pytest.approx(expected, rel=1e-5)
    rows = csv_rows(folder / "grad_unreduced_1-1.csv")  # one backward per step: local == reduced
    assert float(next(r for r in rows if r["name"] == "2.weight")["norm"]) == pytest.approx(
        seen[1]["2.weight"].norm().item(), rel=1e-5
    )


@pytest.mark.parametrize("ops", [["min", "max", "norm"], ["norm", "min"], ["max", "mean"]])
def test_batched_statistics_equal_the_per_tensor_ones(ops):
    from msprobe.pytorch.monitor import _stats, _stats_batch

    generator = torch.Generator().manual_seed(5)
    tensors = [torch.randn(shape, generator=generator) - 0.3 for shape in ((3, 4), (7,), (2, 2, 2))]
    for batched, tensor in zip(_stats_batch(tensors, ops, 1e-8), tensors):
        assert torch.allclose(batched, _stats(tensor, ops, 1e-8))


def test_update_and_ratio_of_adam(tmp_path, monkeypatch):
    monkeypatch.setenv("MONITOR_OUTPUT_DIR", str(tmp_path / "out"))
    (tmp_path / "monitor.json").write_text(json.dumps({"ur_distribution": True, "ops": ["norm", "max"]}))
    model, optimizer = model_and_optimizer()
    monitor = TrainerMon(str(tmp_path / "monitor.json"), params_have_main_grad=False)
    monitor.set_monitor(model, optimizer=optimizer)
    expected = []
    for _ in range(3):
        torch.nn.functional.mse_loss(model(torch.randn(16, 8)), torch.randn(16, 2)).backward()
        optimizer.step()
        optimizer.zero_grad()
        state = optimizer.state[model[0].weight]
        beta1, beta2 = optimizer.param_groups[0]["betas"]
        step = float(state["step"])
        moment = state["exp_avg"] / (1 - beta1**step)
        root = (state["exp_avg_sq"] / (1 - beta2**step)).sqrt()
        expected.append(((moment / (root + 1e-8)).norm().item(), (moment / root).abs().max().item()))
    monitor.finish()
    (folder,) = list((tmp_path / "out").iterdir())
    for step, (update_norm, ratio_max) in enumerate(expected):
        update = next(r for r in csv_rows(folder / f"update_{step}-{step}.csv") if r["name"] == "0.weight")
        ratio = next(r for r in csv_rows(folder / f"ratio_{step}-{step}.csv") if r["name"] == "0.weight")
        assert float(update["norm"]) == pytest.approx(update_norm, rel=1e-5)
        assert float(ratio["max"]) <= ratio_max + 1e-6  # max of the signed ratio never exceeds its largest magnitude
    names = {r["name"] for r in csv_rows(folder / "update_0-0.csv")}
    assert names == {"0.weight", "0.bias", "2.weight", "2.bias"}


def test_update_and_ratio_histograms_in_tensorboard(tmp_path, monkeypatch):
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    config = {"ur_distribution": True, "format": "tensorboard", "ops": ["norm"]}
    folder, _, _ = run(tmp_path, monkeypatch, config, steps=2)
    events = EventAccumulator(str(folder), size_guidance={"histograms": 0})
    events.Reload()
    tags = events.Tags()["histograms"]
    assert "0:0.weight/rank0/update_histogram" in tags and "0:2.bias/rank0/ratio_histogram" in tags
    histogram = events.Histograms("0:0.weight/rank0/update_histogram")
    assert [h.step for h in histogram] == [0, 1]
    assert histogram[0].histogram_value.num == 8 * 16  # every element of the weight counted once
    assert "0:0.weight/rank0/update_norm" in tensorboard_scalars(folder)


def test_update_and_ratio_need_adam(tmp_path, monkeypatch, caplog):
    monkeypatch.setenv("MONITOR_OUTPUT_DIR", str(tmp_path / "out"))
    (tmp_path / "monitor.json").write_text(json.dumps({"ur_distribution": True, "wg_distribution": True}))
    model = torch.nn.Linear(4, 2)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    monitor = TrainerMon(str(tmp_path / "monitor.json"), params_have_main_grad=False)
    monitor.set_monitor(model, optimizer=optimizer)
    for _ in range(2):
        model(torch.randn(3, 4)).sum().backward()
        optimizer.step()
    monitor.finish()
    (folder,) = list((tmp_path / "out").iterdir())
    assert not list(folder.glob("update_*.csv"))
    assert csv_rows(folder / "grad_reduced_1-1.csv")  # the rest of the monitor goes on
    assert sum("exp_avg" in r.getMessage() for r in caplog.records) == 1  # said once, not every step


def test_module_ranks_print_struct_and_cc_distribution(tmp_path, monkeypatch, capsys, caplog):
    config = {
        "xy_distribution": True,
        "wg_distribution": True,
        "module_ranks": [1],  # this single process is rank 0: no module monitoring here
        "print_struct": True,
        "cc_distribution": {"enable": True},
        "ops": ["norm"],
    }
    folder, _, _ = run(tmp_path, monkeypatch, config, steps=2)
    assert not list(folder.glob("actv*.csv"))
    assert csv_rows(folder / "grad_reduced_0-0.csv")
    printed = capsys.readouterr().out
    assert "module names for 'targets'" in printed and "  0\n" in printed and "  2\n" in printed
    assert any("cc_distribution" in record.getMessage() for record in caplog.records)


def test_append_output_writes_on_into_the_earlier_run_folder(tmp_path, monkeypatch):
    first, _, _ = run(tmp_path, monkeypatch, {"wg_distribution": True, "ops": ["norm"]}, steps=2)
    stamp = first.name.rpartition("-rank")[0]
    (tmp_path / "resume").mkdir()
    config = {"wg_distribution": True, "ops": ["norm"], "append_output": [stamp, stamp]}
    monkeypatch.setenv("MONITOR_OUTPUT_DIR", str(tmp_path / "out"))
    (tmp_path / "resume" / "m.json").write_text(json.dumps(config))
    model, optimizer = model_and_optimizer()
    monitor = TrainerMon(str(tmp_path / "resume" / "m.json"), params_have_main_grad=False)
    monitor.set_monitor(model, optimizer=optimizer, start_iteration=10)
    model(torch.randn(4, 8)).sum().backward()
    optimizer.step()
    monitor.finish()
    assert [p.name for p in (tmp_path / "out").iterdir()] == [first.name]
    assert (first / "grad_reduced_0-0.csv").exists() and (first / "grad_reduced_10-10.csv").exists()


@pytest.mark.parametrize("times", [["Dec03_21-34-40"], ["yesterday", "today"]])
def test_bad_append_output_names_the_field(tmp_path, times):
    (tmp_path / "m.json").write_text(json.dumps({"append_output": times}))
    with pytest.raises(ConfigError, match="append_output"):
        TrainerMon(str(tmp_path / "m.json"))


def test_torchscript_modules_are_left_out_with_a_warning(tmp_path, monkeypatch, caplog):
    monkeypatch.setenv("MONITOR_OUTPUT_DIR", str(tmp_path / "out"))
    (tmp_path / "monitor.json").write_text(json.dumps({"xy_distribution": True, "all_xy": True, "ops": ["norm"]}))
    torch.manual_seed(0)
    scripted = torch.jit.script(torch.nn.Sequential(torch.nn.Linear(16, 2), torch.nn.ReLU()))
    model = torch.nn.Sequential(torch.nn.Linear(8, 16), scripted)
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-2)
    monitor = TrainerMon(str(tmp_path / "monitor.json"), params_have_main_grad=False)
    with caplog.at_level("WARNING", logger="msprobe"):
        monitor.set_monitor(model, optimizer=optimizer)  # TorchScript refuses module hooks: no failure here
    warnings = [r.getMessage() for r in caplog.records if "TorchScript" in r.getMessage()]
    assert len(warnings) == 1 and warnings[0].endswith(": 1")
    for _ in range(2):
        model(torch.randn(4, 8)).sum().backward()
        optimizer.step()
        optimizer.zero_grad()
    monitor.finish()
    (folder,) = list((tmp_path / "out").iterdir())
    names = {row["name"] for row in csv_rows(folder / "actv_0-0.csv")}
    assert {"0.input", "0.output"} <= names and not any(name.startswith("1.") for name in names)
