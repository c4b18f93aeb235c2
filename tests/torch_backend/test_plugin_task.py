"""A plugin's own task and perturbation in a real PyTorch run: the example plugin's heartbeat and round trip."""

import csv
import importlib
import json

import pytest
import torch
from repo_paths import REPO_ROOT

from msprobe.core.plugins import get_registry
from msprobe.pytorch import PrecisionDebugger


@pytest.fixture
def example_plugin(monkeypatch):
    monkeypatch.syspath_prepend(str(REPO_ROOT / "examples" / "msprobe-example-plugin" / "src"))
    module = importlib.import_module("msprobe_example_plugin")
    registry = get_registry()
    registry.register(module, name="example")
    yield module
    registry.unregister("example")


def run_steps(config_file, steps):
    debugger = PrecisionDebugger(config_path=str(config_file))
    for _ in range(steps):
        debugger.start()
        torch.relu(torch.tensor([-1.0, 1.0]) * 3.0)
        debugger.stop()
        debugger.step()


def test_a_plugin_task_runs_with_its_section(tmp_path, example_plugin):
    config = {"task": "heartbeat", "dump_path": str(tmp_path / "dump"), "heartbeat": {"every": 2}}
    (tmp_path / "config.json").write_text(json.dumps(config))
    run_steps(tmp_path / "config.json", 4)
    written = sorted(p.relative_to(tmp_path / "dump").as_posix() for p in (tmp_path / "dump").rglob("heartbeat.json"))
    assert written == ["step0/rank/heartbeat.json", "step2/rank/heartbeat.json"]  # every second step
    PrecisionDebugger.current().finish()  # as at exit: step 4 never ran, so the task hears nothing of it
    assert not (tmp_path / "dump" / "step4").exists()
    record = json.loads((tmp_path / "dump" / "step2" / "rank" / "heartbeat.json").read_text())
    assert record["step"] == 2 and record["seconds"] >= 0


def test_a_plugin_perturbation_for_any_framework_runs_on_torch(tmp_path, example_plugin):
    config = {"task": "free_benchmark", "dump_path": str(tmp_path / "dump"), "level": "L1",
              "free_benchmark": {"pert_mode": "scale_round_trip", "list": ["mul", "relu"]}}  # fmt: skip
    (tmp_path / "config.json").write_text(json.dumps(config))
    debugger = PrecisionDebugger(config_path=str(tmp_path / "config.json"))
    big = torch.tensor([3.0e38, 1.0])  # within a factor 2 of float32's largest value: times 2 overflows
    debugger.start()
    small = torch.relu(torch.tensor([-1.0, 1.0]))
    huge = torch.mul(big, 1.0)
    debugger.stop()
    debugger.step()
    assert torch.equal(small, torch.tensor([0.0, 1.0])) and torch.equal(huge, big)  # check mode changes nothing
    report = tmp_path / "dump" / "free_benchmark.csv"
    rows = list(csv.DictReader(report.open())) if report.exists() else []
    assert {row["api_name"] for row in rows} == {"Torch.mul.0.forward"}  # only the near-overflow input mattered


@pytest.mark.parametrize("failing", ["install", "remove", "end_step"])
def test_a_plugin_task_whose_hooks_raise_is_logged_once_and_training_goes_on(tmp_path, caplog, failing):
    from msprobe.core.backend import Task
    from msprobe.core.hookspecs import hookimpl

    class Hooks:
        def install(self):
            if failing == "install":
                raise RuntimeError("cannot install")

        def remove(self):
            if failing == "remove":
                raise RuntimeError("cannot remove")

        def end_step(self):
            if failing == "end_step":
                raise RuntimeError("cannot end the step")

    class Plugin:
        @hookimpl
        def msprobe_tasks(self):
            return [Task("fragile")]

        @hookimpl
        def msprobe_task_hooks(self, session):
            return Hooks() if session.config.task == "fragile" else None

    registry = get_registry()
    registry.register(Plugin(), name="fragile")
    try:
        (tmp_path / "config.json").write_text(json.dumps({"task": "fragile", "dump_path": str(tmp_path / "d")}))
        run_steps(tmp_path / "config.json", 3)  # raises nothing
    finally:
        registry.unregister("fragile")
    assert caplog.text.count(f"the hooks of task 'fragile' failed in {failing}()") == 1


def test_a_plugin_taking_over_a_built_in_perturbation_is_warned_about_once(caplog):
    import types

    import pluggy

    from msprobe.core.backend import Perturbation

    def ours(tensor):
        return tensor

    plugin = types.ModuleType("noise_override")
    hookimpl = pluggy.HookimplMarker("msprobe")

    @hookimpl
    def msprobe_free_benchmark_perturbations():
        return [Perturbation("add_noise", ours, None, "the plugin's own add_noise")]

    plugin.msprobe_free_benchmark_perturbations = msprobe_free_benchmark_perturbations
    registry = get_registry()
    registry.register(plugin, name="noise-override")
    try:
        for _ in range(3):
            assert registry.perturbations("pytorch")["add_noise"].function is ours
    finally:
        registry.unregister("noise-override")
    said = [r.getMessage() for r in caplog.records if "takes over" in r.getMessage()]
    assert said == ["perturbation 'add_noise' of plugin 'noise-override' takes over the one plugin 'pytorch' provides"]
