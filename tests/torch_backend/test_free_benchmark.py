"""Task free_benchmark: perturb inputs, re-run, report fragile APIs (check) or use the perturbed result (fix)."""

import csv
import json
import sys
import types

import pytest
import torch

from models import train_mixed_net
from msprobe.core.backend import Perturbation
from msprobe.core.errors import BackendError, UsageError
from msprobe.core.hookspecs import hookimpl
from msprobe.core.plugins import get_registry
from msprobe.pytorch import PrecisionDebugger


def fragile(x, r1, r2):
    """Cancels in its input dtype: (x + 4096) - 4096 loses x in float16, keeps it in float32."""
    big = torch.full_like(x, 4096.0)
    return (x + big) - big + r1 * 0 + r2 * 0


@pytest.fixture
def fake_npu(monkeypatch):
    module = types.ModuleType("torch_npu")
    module.npu_rotary_mul = fragile
    monkeypatch.setitem(sys.modules, "torch_npu", module)
    return module


def rows(path):
    file = path / "free_benchmark.csv"
    return list(csv.DictReader(file.open())) if file.exists() else []


def debugger(tmp_path, strict=False, **section):
    config = {"task": "free_benchmark", "dump_path": str(tmp_path), "level": "L1", "free_benchmark": section}
    config["strict"] = strict
    (tmp_path / "fb.json").write_text(json.dumps(config))
    return PrecisionDebugger(config_path=str(tmp_path / "fb.json"))


def test_fragile_api_is_flagged_and_robust_ones_are_not(tmp_path, fake_npu):
    d = debugger(tmp_path)
    x = torch.tensor([0.3, 1.7, -2.2], dtype=torch.float16)
    d.start()
    out = fake_npu.npu_rotary_mul(x, x, x)
    torch.relu(x)
    torch.matmul(x.reshape(3, 1), x.reshape(1, 3))
    torch.nn.functional.layer_norm(x, (3,))
    d.stop()
    d.step()
    found = rows(tmp_path)
    assert [row["api_name"] for row in found] == ["NPU.npu_rotary_mul.0.forward"]
    row = found[0]
    assert (row["pert_mode"], row["stage"], row["step"], row["dtype"], row["shape"]) == (
        "improve_precision",
        "forward",
        "0",
        "float16",
        "(3,)",
    )
    assert float(row["max_rel"]) > 1
    assert torch.equal(out, fragile(x, x, x))  # check mode leaves the result alone


def test_fix_hands_back_the_higher_precision_result(tmp_path, fake_npu):
    d = debugger(tmp_path, handler_type="fix")
    x = torch.tensor([0.3, 1.7, -2.2], dtype=torch.float16)
    d.start()
    out = fake_npu.npu_rotary_mul(x, x, x)
    d.stop()
    d.step()
    assert out.dtype == torch.float16
    assert torch.allclose(out, x, rtol=1e-3)  # the float32 computation kept x; float16 would have lost it
    assert rows(tmp_path) == []


def test_backward_stage_flags_a_fragile_gradient_and_not_a_robust_one(tmp_path):
    """var's gradient, 2 (x - mean) / (n - 1), cancels: values a few units in the last place apart move it by
    ~10% under bit noise, while relu's gradient (0 or 1) does not move. The fragile API's row must be there."""
    d = debugger(tmp_path, fuzz_stage="backward", pert_mode="bit_noise", list=["var", "relu"])
    x = torch.tensor([1.0, 1.0 + 2e-6, 1.0 + 5e-6, 1.0 - 3e-6], dtype=torch.float32, requires_grad=True)
    d.start()
    (torch.var(x) * 1e6 + torch.relu(x).sum()).backward()
    d.stop()
    d.step()
    found = rows(tmp_path)
    assert [row["api_name"] for row in found] == ["Torch.var.0.backward"], found
    assert found[0]["stage"] == "backward" and float(found[0]["max_rel"]) > 0.01
    assert torch.isfinite(x.grad).all()  # the training's own gradient is untouched


def test_preheat_learns_each_apis_normal_sensitivity(tmp_path, fake_npu):
    d = debugger(tmp_path, if_preheat=True, preheat_step=2, max_sample=5)
    x = torch.tensor([0.3, 1.7, -2.2], dtype=torch.float16)
    for _ in range(3):
        d.start()
        fake_npu.npu_rotary_mul(x, x, x)
        d.stop()
        d.step()
    assert rows(tmp_path) == []  # as bad after preheating as during it: nothing new to report


@pytest.mark.parametrize("mode", ["improve_precision", "add_noise", "bit_noise", "no_change", "change_value", "to_cpu"])
def test_every_built_in_perturbation_runs_a_real_model_without_changing_it(tmp_path, mode, caplog):
    _, plain = train_mixed_net(None)
    config = {
        "task": "free_benchmark",
        "dump_path": str(tmp_path),
        "level": "L1",
        "free_benchmark": {"pert_mode": mode},
    }
    (tmp_path / "fb.json").write_text(json.dumps(config))
    _, losses = train_mixed_net(lambda model: PrecisionDebugger(config_path=str(tmp_path / "fb.json")))
    assert all(torch.equal(a, b) for a, b in zip(plain, losses))
    for row in rows(tmp_path):
        assert row["pert_mode"] == mode and float(row["max_rel"]) > 0
    assert "msprobe" not in caplog.text  # every API checked, the 0-d loss among them


def test_a_third_party_perturbation_is_used(tmp_path, monkeypatch, fake_npu):
    class Shift:
        @hookimpl
        def msprobe_free_benchmark_perturbations(self):
            return [Perturbation("shift_by_one", lambda t: t + 1, None, "moves every value by one")]

    registry = get_registry()
    registry.register(Shift(), name="shift")
    assert "shift_by_one" in registry.perturbations(framework="pytorch")
    d = debugger(tmp_path, pert_mode="shift_by_one", list=["relu"])
    d.start()
    torch.relu(torch.tensor([1.0, 2.0]))
    d.stop()
    d.step()
    assert [row["pert_mode"] for row in rows(tmp_path)] == ["shift_by_one"]


@pytest.mark.parametrize("strict", [False, True])
def test_a_failing_perturbation_is_logged_or_raised_with_strict(tmp_path, caplog, strict):
    def broken(tensor):
        raise ValueError("simulated perturbation failure")

    class Broken:
        @hookimpl
        def msprobe_free_benchmark_perturbations(self):
            return [Perturbation("always_fails", broken, None, "raises")]

    registry = get_registry()
    registry.register(Broken(), name="always_fails")
    try:
        d = debugger(tmp_path, strict=strict, pert_mode="always_fails", list=["relu"])
        d.start()
        try:
            if strict:
                with pytest.raises(ValueError, match="simulated perturbation failure"):
                    torch.relu(torch.tensor([-1.0, 2.0]))
            else:
                assert torch.equal(torch.relu(torch.tensor([-1.0, 2.0])), torch.tensor([0.0, 2.0]))
                assert "simulated perturbation failure" in caplog.text
        finally:
            d.stop()
    finally:
        registry.unregister("always_fails")


def test_unknown_perturbation_is_a_clear_error(tmp_path):
    d = debugger(tmp_path, pert_mode="twist")
    with pytest.raises((UsageError, BackendError), match="twist"):
        d.start()


def test_config_validate_checks_pert_mode_against_the_installed_plugins(tmp_path):
    from click.testing import CliRunner

    from msprobe.cli.main import cli

    def config_file(name, **extra):
        section = {"pert_mode": name}
        path = tmp_path / f"{name}.json"
        path.write_text(json.dumps({"task": "free_benchmark", "dump_path": "d", "free_benchmark": section, **extra}))
        return str(path)

    twist, noise = config_file("twist"), config_file("add_noise")
    result = CliRunner().invoke(cli, ["config", "validate", twist, noise])
    assert result.exit_code == 2
    assert f"invalid: {twist}: field free_benchmark.pert_mode: 'twist'" in result.output
    assert "add_noise" in result.output.split("available: ")[1]  # the message lists what is there
    assert f"valid: {noise}" in result.output and "Traceback" not in result.output

    class Twist:
        @hookimpl
        def msprobe_free_benchmark_perturbations(self):
            return [Perturbation("twist", lambda t: t.flip(0), None, "reverses the values")]

    registry = get_registry()
    registry.register(Twist(), name="twist")
    try:
        assert CliRunner().invoke(cli, ["config", "validate", twist]).exit_code == 0
    finally:
        registry.unregister("twist")


def test_calls_inside_vmap_are_checked_over_the_whole_batch(tmp_path, fake_npu, caplog):
    d = debugger(tmp_path)
    x = torch.tensor([[0.3, 1.7, -2.2], [0.1, -0.6, 2.9]], dtype=torch.float16)
    d.start()
    out = torch.func.vmap(lambda row: torch.relu(fake_npu.npu_rotary_mul(row, row, row)))(x)
    d.stop()
    d.step()
    assert "failed" not in caplog.text
    [row] = rows(tmp_path)
    assert (row["api_name"], row["shape"]) == ("NPU.npu_rotary_mul.0.forward", "(2, 3)")  # every sample
    assert torch.equal(out, torch.relu(fragile(x, x, x)))


@pytest.mark.parametrize("layout", [torch.strided, torch.jagged])
@pytest.mark.parametrize("mode", ["improve_precision", "add_noise", "bit_noise", "no_change", "change_value", "to_cpu"])
def test_apis_on_nested_tensors_are_checked(tmp_path, caplog, mode, layout):
    """Every perturbation reaches a nested tensor's components; the comparison reads the values they hold."""
    torch.manual_seed(0)
    nested = torch.nested.nested_tensor([torch.rand(3, 4), torch.rand(2, 4)], layout=layout, dtype=torch.float16)
    checker = debugger(tmp_path, pert_mode=mode)
    checker.start()
    sines = torch.sin(nested)
    checker.stop()
    checker.step()
    assert "msprobe" not in caplog.text  # nothing skipped
    expected = [torch.sin(component) for component in nested.unbind()]
    assert all(torch.equal(a, b) for a, b in zip(sines.unbind(), expected))  # check mode leaves results alone
    if mode == "change_value":  # the first and last values of each component swapped: the outputs move with them
        [row] = rows(tmp_path)
        assert row["api_name"] == "Torch.sin.0.forward" and row["shape"] == "(2, 3, 4)"  # the padded shape
        assert float(row["max_rel"]) > 1e-4


@pytest.mark.parametrize("mode", ["improve_precision", "add_noise", "bit_noise", "no_change", "change_value", "to_cpu"])
def test_the_encoder_s_padding_free_path_runs_unharmed(tmp_path, caplog, mode):
    """nn.TransformerEncoder's fast path (nested tensors inside one fused call) gives the same result checked."""
    torch.manual_seed(0)
    layer = torch.nn.TransformerEncoderLayer(8, 2, 16, batch_first=True, dropout=0.0)
    encoder = torch.nn.TransformerEncoder(layer, 2, enable_nested_tensor=True).eval()
    x = torch.randn(2, 5, 8)
    padding = torch.tensor([[False] * 5, [False] * 3 + [True] * 2])
    with torch.no_grad():
        expected = encoder(x, src_key_padding_mask=padding)
    checker = debugger(tmp_path, pert_mode=mode)
    checker.start()
    with torch.no_grad():
        out = encoder(x, src_key_padding_mask=padding)
    checker.stop()
    checker.step()
    assert torch.equal(torch.nan_to_num(out), torch.nan_to_num(expected))
    assert "msprobe" not in caplog.text


@pytest.mark.parametrize("declares_fix", [True, False])
def test_a_plugin_perturbation_may_fix_only_if_it_declares_so(tmp_path, fake_npu, declares_fix):
    def exact(tensor):  # float64, as a plugin's "better" computation would be
        return tensor.to(torch.float64)

    class Exact:
        @hookimpl
        def msprobe_free_benchmark_perturbations(self):
            return [Perturbation("exact", exact, "pytorch", "float64", fix=declares_fix)]

    registry = get_registry()
    registry.register(Exact(), name="exact")
    try:
        d = debugger(tmp_path, pert_mode="exact", handler_type="fix")
        x = torch.tensor([0.3, 1.7, -2.2], dtype=torch.float16)
        if not declares_fix:
            with pytest.raises(UsageError, match="'fix' needs a perturbation that declares fix=True; 'exact' does not"):
                d.start()
            return
        d.start()
        out = fake_npu.npu_rotary_mul(x, x, x)
        d.stop()
        assert not torch.allclose(fragile(x, x, x), x, rtol=1e-3)  # float16 loses x in (x + 4096) - 4096
        assert out.dtype == torch.float16 and torch.allclose(out, x, rtol=1e-3)  # the float64 run kept it
    finally:
        registry.unregister("exact")


def _run_and_finish(tmp_path, fake_npu, caplog, calls, **section):
    d = debugger(tmp_path, **section)
    x = torch.tensor([0.3, 1.7, -2.2], dtype=torch.float16)
    caplog.set_level("INFO", logger="msprobe")
    d.start()
    for call in calls:
        {
            "rotary": lambda: fake_npu.npu_rotary_mul(x, x, x),
            "relu": lambda: torch.relu(x),
            "matmul": lambda: torch.matmul(x.reshape(3, 1), x.reshape(1, 3)),
            "layer_norm": lambda: torch.nn.functional.layer_norm(x, (3,)),
        }[call]()
    d.stop()
    d.step()
    d.finish()
    return [r for r in caplog.records if "free benchmark (" in r.getMessage()]


def test_a_run_ends_with_its_verdict_naming_the_worst_failure(tmp_path, fake_npu, caplog):
    said = _run_and_finish(tmp_path, fake_npu, caplog, ["rotary", "relu", "matmul", "layer_norm"])
    [row] = rows(tmp_path)  # six checks: matmul's two reshapes are APIs too
    assert [r.levelname for r in said] == ["WARNING"]
    assert said[0].getMessage() == (
        "free benchmark (improve_precision, forward): 1 of 6 checks failed, in 1 of 5 APIs; the worst is "
        f"NPU.npu_rotary_mul.0.forward (max_rel {float(row['max_rel']):.3g}, threshold {2**-8:.3g}); "
        f"see {tmp_path / 'free_benchmark.csv'}"
    )


def test_a_run_with_no_failure_says_how_much_it_checked(tmp_path, fake_npu, caplog):
    said = _run_and_finish(tmp_path, fake_npu, caplog, ["relu", "matmul", "layer_norm", "relu"])
    assert [(r.levelname, r.getMessage()) for r in said] == [
        ("INFO", "free benchmark (improve_precision, forward): 6 checks of 4 APIs, none moved beyond its threshold; "
                 "nothing was written"),
    ]  # fmt: skip
    assert rows(tmp_path) == []


def test_a_run_that_checked_nothing_says_why(tmp_path, fake_npu, caplog):
    said = _run_and_finish(tmp_path, fake_npu, caplog, ["rotary", "relu"], list=["softmax"])
    assert [(r.levelname, r.getMessage()) for r in said] == [
        ("WARNING", "free benchmark (improve_precision, forward) checked nothing: no selected call had a "
                    "floating-point input"),
    ]  # fmt: skip
    (tmp_path / "p").mkdir()
    said = _run_and_finish(tmp_path / "p", fake_npu, caplog, ["rotary", "relu"], if_preheat=True, preheat_step=3)
    assert said[-1].getMessage() == (
        "free benchmark (improve_precision, forward) made 2 checks, all in the first 3 steps (preheat_step), which "
        "learn thresholds and report nothing"
    )
