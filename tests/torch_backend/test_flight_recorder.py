"""The NaN flight recorder: nothing on disk while all is finite; on a trigger, the window's steps and a report.

The model's loss is ``log(|fc(x)| * scale)`` with ``scale`` 1/(step+1) and
exactly 0 at step 7: ``Torch.log`` at step 7 is the first call that makes
an inf (log 0), its input is all zeros, and every step before is finite.
"""

import json
import os
import subprocess
import sys
import textwrap

import pytest
import torch
from click.testing import CliRunner

from msprobe.cli.main import cli
from msprobe.core.dump.reader import read_dump
from msprobe.pytorch import PrecisionDebugger


class Net(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = torch.nn.Linear(4, 4)

    def forward(self, x, scale):
        return torch.log(self.fc(x).abs() * scale).sum()


def _train(tmp_path, steps, section=None, level="L1", nan_at=7, losses=None, flush_at=None):
    torch.manual_seed(0)
    model = Net()
    config = tmp_path / "config.json"
    config.write_text(json.dumps({"task": "flight_recorder", "level": level, "dump_path": str(tmp_path / "dump"),
                                  "flight_recorder": section or {}}))  # fmt: skip
    debugger = PrecisionDebugger(config_path=str(config), model=model)
    for step in range(steps):
        debugger.start()
        scale = torch.tensor(0.0 if step == nan_at else 1.0 / (step + 1))
        loss = model(torch.randn(2, 4), scale)
        loss.backward()
        debugger.stop()
        if flush_at == step:
            debugger.flush()
        debugger.step(loss=losses[step] if losses else None)
    return tmp_path / "dump"


def _report(dump):
    return json.loads((dump / "flight_recorder_report.json").read_text())


def test_nothing_is_written_while_everything_is_finite(tmp_path):
    dump = _train(tmp_path, 7)  # steps 0 to 6: the NaN would come at step 7
    assert not dump.exists() or not any(dump.iterdir())


def test_the_first_nan_writes_steps_3_to_7_and_names_the_api(tmp_path):
    dump = _train(tmp_path, 10, {"window": 5})
    assert sorted(p.name for p in dump.iterdir()) == ["flight_recorder_report.json", *(f"step{n}" for n in range(3, 8))]
    report = _report(dump)
    first = report["first_nonfinite"]
    assert (first["api"], first["step"], first["rank"]) == ("Torch.log.0.forward", 7, None)
    assert report["last_finite_step"] == 6
    assert any("torch.log" in frame for frame in first["stack"])
    step7 = read_dump(dump / "step7" / "rank" / "dump.json")
    assert step7.task == "statistics"  # an ordinary statistics dump
    (saved,) = (dump / "step7" / "rank" / "dump_tensor_data").iterdir()
    assert saved.name == "Torch.log.0.forward.input.0.pt"
    assert torch.equal(torch.load(saved, weights_only=True), torch.zeros(2, 4))  # |fc(x)| * 0
    for step in range(3, 7):  # the steps before hold the same calls, finite
        data = read_dump(dump / f"step{step}" / "rank" / "dump.json").data
        assert "Torch.log.0.forward" in data and "Functional.linear.0.forward" in data


def test_at_mix_the_report_names_the_module(tmp_path):
    dump = _train(tmp_path, 8, {"window": 2}, level="mix")
    assert _report(dump)["first_nonfinite"]["module"] is None  # log runs outside fc, in the model's forward
    assert sorted(p.name for p in dump.iterdir() if p.is_dir()) == ["step6", "step7"]
    assert "Module.fc.Linear.forward.0" in read_dump(dump / "step7" / "rank" / "dump.json").data


def test_a_loss_spike_triggers_when_asked_for(tmp_path):
    losses = [1.0, 1.01, 0.99, 1.0, 9.0]
    dump = _train(tmp_path, 5, {"window": 3, "triggers": ["loss_spike"]}, nan_at=99, losses=losses)
    report = _report(dump)
    assert [t["trigger"] for t in report["triggers"]] == ["loss_spike"] and report["triggers"][0]["step"] == 4
    assert sorted(p.name for p in dump.iterdir() if p.is_dir()) == ["step2", "step3", "step4"]
    assert report["first_nonfinite"] is None


def test_flush_writes_the_window(tmp_path):
    dump = _train(tmp_path, 4, {"window": 2, "triggers": ["flush"]}, nan_at=99, flush_at=3)
    assert sorted(p.name for p in dump.iterdir() if p.is_dir()) == ["step2", "step3"]
    assert [t["trigger"] for t in _report(dump)["triggers"]] == ["flush"]


def test_nonfinite_is_not_a_trigger_unless_named(tmp_path):
    dump = _train(tmp_path, 9, {"triggers": ["flush"]})
    assert not dump.exists() or not any(dump.iterdir())


def test_the_written_steps_compare_like_any_dump(tmp_path):
    dump = _train(tmp_path, 8, {"window": 3})
    spec = tmp_path / "compare.json"
    spec.write_text(json.dumps({"npu_path": str(dump / "step7" / "rank" / "dump.json"),
                                "bench_path": str(dump / "step6" / "rank" / "dump.json")}))  # fmt: skip
    result = CliRunner().invoke(cli, ["compare", "-i", str(spec), "-o", str(tmp_path / "out")])
    assert result.exit_code == 1  # two steps of different data: something differs, and nothing is missing
    tables = list((tmp_path / "out").glob("compare_result_*"))
    assert tables and "results:" in result.output


def test_a_training_that_dies_after_its_first_nan_keeps_the_steps(tmp_path):
    script = tmp_path / "train.py"
    script.write_text(
        textwrap.dedent(f"""
        import json, math, torch
        from msprobe.pytorch import PrecisionDebugger
        torch.manual_seed(0)
        fc = torch.nn.Linear(4, 4)
        open({str(tmp_path / "c.json")!r}, "w").write(json.dumps({{"task": "flight_recorder", "level": "L1",
            "dump_path": {str(tmp_path / "dump")!r}, "flight_recorder": {{"window": 3}}}}))
        debugger = PrecisionDebugger(config_path={str(tmp_path / "c.json")!r})
        for step in range(10):
            debugger.start()
            loss = torch.log(fc(torch.randn(2, 4)).abs() * (0.0 if step == 5 else 1.0)).sum()
            if not math.isfinite(loss.item()):
                raise SystemExit("loss is not finite")  # the training stops, mid-step
            debugger.stop()
            debugger.step()
    """)
    )
    result = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, env=os.environ)
    assert result.returncode != 0
    dump = tmp_path / "dump"
    assert sorted(p.name for p in dump.iterdir() if p.is_dir()) == ["step3", "step4", "step5"]
    assert "Torch.log.0.forward" in read_dump(dump / "step5" / "rank" / "dump.json").data
    assert _report(dump)["first_nonfinite"]["step"] == 5


@pytest.mark.parametrize(
    "section, message",
    [({"window": 0}, "flight_recorder.window"), ({"triggers": []}, "flight_recorder.triggers"),
     ({"triggers": ["nan"]}, "flight_recorder.triggers"), ({"scope": ["Torch.log.0.forward"]},
                                                           "flight_recorder.scope")],
)  # fmt: skip
def test_bad_sections_name_the_field(tmp_path, section, message):
    from msprobe.core.config import validate_config_dict
    from msprobe.core.errors import ConfigError

    with pytest.raises(ConfigError, match=message):
        validate_config_dict({"task": "flight_recorder", "dump_path": "d", "flight_recorder": section})
    with pytest.raises(ConfigError, match="level"):
        validate_config_dict({"task": "flight_recorder", "dump_path": "d", "level": "L0"})


def test_a_masked_attention_s_minus_inf_is_no_trigger(tmp_path):
    """A causal mask filled with -inf (as most LLMs build one) and softmax over it: no call produced an inf
    from finite inputs, so nothing is written; a NaN made later still triggers."""
    torch.manual_seed(0)
    config = tmp_path / "config.json"
    config.write_text(json.dumps({"task": "flight_recorder", "level": "L1", "dump_path": str(tmp_path / "dump")}))
    debugger = PrecisionDebugger(config_path=str(config))
    for step in range(3):
        debugger.start()
        scores = torch.randn(4, 4)
        mask = torch.full((4, 4), float("-inf")).triu(1)
        weights = torch.softmax(scores + mask, dim=-1)
        if step == 2:
            weights = weights / weights.sum() * 0.0 / 0.0  # 0/0: nan from finite values
        debugger.stop()
        debugger.step()
    report = _report(tmp_path / "dump")
    assert report["first_nonfinite"]["step"] == 2 and report["first_nonfinite"]["api"].startswith("Tensor.__truediv__")


def test_after_a_trigger_the_recorder_goes_on(tmp_path):
    losses = [1.0, 1.0, 1.0, 1.0, 9.0, 1.0, 1.0, 1.0]
    dump = _train(tmp_path, 8, {"window": 3, "triggers": ["loss_spike", "flush"]}, nan_at=99, losses=losses,
                  flush_at=7)  # fmt: skip
    report = _report(dump)
    kinds = [(t["trigger"], t["steps_written"]) for t in report["triggers"]]
    assert kinds == [("loss_spike", [2, 3, 4]), ("flush", [5, 6, 7])]  # the spike is kept out of the mean
    assert sorted(p.name for p in dump.iterdir() if p.is_dir()) == [f"step{n}" for n in range(2, 8)]


def _debugger_of(tmp_path, level):
    """A flight-recorder debugger for Net, and the call that trains one step with it."""
    config = tmp_path / "config.json"
    config.write_text(json.dumps({"task": "flight_recorder", "level": level, "dump_path": str(tmp_path / "dump"),
                                  "flight_recorder": {"window": 3}}))  # fmt: skip
    torch.manual_seed(0)
    model = Net()
    return PrecisionDebugger(config_path=str(config), model=model), model


@pytest.mark.parametrize("level", ["L1", "mix"])
def test_the_per_call_path_in_c_records_the_window_and_hands_over_the_first_nan(tmp_path, monkeypatch, level):
    from msprobe.pytorch.dump import fast_path

    if not fast_path.AVAILABLE:
        pytest.fail("msprobe-torch's C extension is not built: pip install needs a C compiler")
    found = {}
    for path, available in (("c", True), ("python", False)):
        monkeypatch.setattr(fast_path, "AVAILABLE", available)
        folder = tmp_path / path
        folder.mkdir()
        debugger, model = _debugger_of(folder, level)
        for step in range(9):
            debugger.start()
            assert (debugger._hooks.fast_path is not None) == available
            model(torch.randn(2, 4), torch.tensor(0.0 if step == 7 else 1.0 / (step + 1))).backward()
            debugger.stop()
            debugger.step()
        dump = folder / "dump"
        found[path] = (
            {step: read_dump(dump / f"step{step}" / "rank" / "dump.json").data for step in (5, 6, 7)},
            _report(dump)["first_nonfinite"],
        )
        assert sorted(p.name for p in dump.iterdir()) == ["flight_recorder_report.json", "step5", "step6", "step7"]
    (steps, first) = found["c"]
    assert (first["api"], first["step"]) == ("Torch.log.0.forward", 7)  # the inf comes from log(0) at step 7
    assert steps == found["python"][0]  # the same entries either way
    assert first == found["python"][1]


def test_a_loss_spike_that_lasts_is_one_event(tmp_path):
    """Every loss from step 4 on is nan: the loss-spike trigger fires at step 4 only, not again at 5, 6 and 7;
    a normal loss ends the event, and the next spike is a new one."""
    nan = float("nan")
    losses = [1.0, 1.0, 1.0, 1.0, nan, nan, nan, 1.0, 9.0]
    dump = _train(tmp_path, 9, {"window": 2, "triggers": ["loss_spike"]}, nan_at=99, losses=losses)
    fired = [t["step"] for t in _report(dump)["triggers"]]
    assert fired == [4, 8]


def test_the_loss_given_as_a_tensor_that_needs_a_gradient_gives_no_warning(tmp_path):
    import warnings

    torch.manual_seed(0)
    model = Net()
    config = tmp_path / "config.json"
    config.write_text(json.dumps({"task": "flight_recorder", "level": "L1", "dump_path": str(tmp_path / "dump")}))
    debugger = PrecisionDebugger(config_path=str(config), model=model)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        for _ in range(3):
            debugger.start()
            loss = model(torch.randn(2, 4), torch.tensor(1.0))
            loss.backward()
            debugger.stop()
            debugger.step(loss=loss)  # as docs/first_divergence.md shows it
    assert loss.requires_grad
    assert not [w for w in caught if "requires_grad" in str(w.message)], [str(w.message) for w in caught]


def test_the_report_names_the_call_the_diagnosis_names(tmp_path):
    from msprobe.core.diagnosis import first_nonfinite

    dump = _train(tmp_path, 8, {"window": 3}, level="mix")
    report = _report(dump)["first_nonfinite"]
    made = first_nonfinite(read_dump(dump / "step7" / "rank"))
    assert made is not None and (report["api"], report["module"]) == (made.name, made.module) == (
        "Torch.log.0.forward",
        None,
    )


def test_a_full_disk_loses_the_steps_it_must_and_still_writes_the_report(tmp_path, monkeypatch, caplog):
    """Step 4 cannot be written (ENOSPC): the log names it and its folder, the other steps are written, and
    the report lists it under steps_lost."""
    import errno

    from msprobe.core.recording import flight

    real = flight.BufferedWriter.go_live

    def go_live(writer):
        if writer.step == 4:
            raise OSError(errno.ENOSPC, "No space left on device")
        real(writer)

    monkeypatch.setattr(flight.BufferedWriter, "go_live", go_live)
    dump = _train(tmp_path, 10, {"window": 5})
    record = _report(dump)["triggers"][0]
    assert record["steps_written"] == [3, 5, 6, 7] and record["steps_lost"] == [4]
    assert f"step 4 could not be written to {dump / 'step4' / 'rank'}: No space left on device" in caplog.text
