"""mindstudio-probe 26.x's config fields: accepted with 26.x's meaning, and the 1.2.2 defaults kept otherwise.

What each field must do comes from 26.x's documentation of config.json
(extra_info, precision, risk_level, dump_enable, task acc_check,
async_dump's rules); the starter configs are checked by validating them.
"""

import json
import os

import pytest
from click.testing import CliRunner

from msprobe.cli.main import cli
from msprobe.core.config import DebuggerConfig, load_config, validate_config_dict
from msprobe.core.dump.writer import DumpWriter
from msprobe.core.errors import ConfigError

# a 26.x statistics config as its documentation lays one out
CONFIG_26X = {
    "task": "statistics",
    "dump_path": "./dump",
    "rank": [],
    "step": [],
    "level": "L1",
    "async_dump": False,
    "extra_info": True,
    "precision": "high",
    "statistics": {"scope": [], "list": [], "tensor_list": [], "data_mode": ["all"], "summary_mode": "statistics"},
}


def test_a_26x_config_validates_with_its_fields():
    config = validate_config_dict(CONFIG_26X)
    assert (config.extra_info, config.precision, config.risk_level, config.dump_enable) == (True, "high", None, None)
    assert config.follows_26x


@pytest.mark.parametrize("field", ["extra_info", "precision", "risk_level", "dump_enable"])
def test_risk_level_defaults_to_focus_once_a_26x_only_field_is_there(field):
    value = {"extra_info": False, "precision": "low", "risk_level": "FOCUS", "dump_enable": True}[field]
    assert validate_config_dict({"dump_path": "d", field: value}).effective_risk_level == "FOCUS"
    assert validate_config_dict({"dump_path": "d"}).effective_risk_level == "ALL"  # 1.2.2's spelling: every API


def test_an_explicit_risk_level_wins():
    assert validate_config_dict({"dump_path": "d", "risk_level": "ALL"}).effective_risk_level == "ALL"
    assert validate_config_dict({"dump_path": "d", "risk_level": "CORE"}).effective_risk_level == "CORE"


@pytest.mark.parametrize(
    "change, field",
    [
        ({"risk_level": "HIGH"}, "risk_level"),
        ({"precision": "medium"}, "precision"),
        ({"extra_info": "yes please"}, "extra_info"),
        ({"dump_enable": [1]}, "dump_enable"),
        ({"folder_without_rank": "pid"}, "folder_without_rank"),
        ({"statistics": {"tensor_list": ["relu"]}}, "statistics.tensor_list"),
    ],
)
def test_bad_26x_values_name_their_field(tmp_path, change, field):
    path = tmp_path / "config.json"
    path.write_text(json.dumps({**CONFIG_26X, **change}))
    with pytest.raises(ConfigError) as error:
        load_config(path)
    assert str(path) in str(error.value) and f"{field}:" in str(error.value)


def test_task_acc_check_is_run_ut_with_its_section():
    config = validate_config_dict(
        {"task": "acc_check", "dump_path": "d", "acc_check": {"white_list": ["conv2d"], "error_data_path": "./e"}}
    )
    assert config.task == "run_ut" and config.run_ut.white_list == ["conv2d"]
    assert config.run_ut.error_data_path == "./e" and config.follows_26x
    with pytest.raises(ConfigError, match="acc_check"):
        validate_config_dict({"task": "acc_check", "dump_path": "d", "acc_check": {}, "run_ut": {}})


@pytest.mark.parametrize("task", ["structure", "overflow_check", "free_benchmark"])
def test_async_dump_follows_26x_rules_in_a_26x_config(task):
    raw = {"task": task, "dump_path": "d", "async_dump": True}
    validate_config_dict(raw)  # 1.2.2's spelling: the switch is ignored where it does not apply
    with pytest.raises(ConfigError, match="async_dump: works only with task 'statistics' or 'tensor'"):
        validate_config_dict({**raw, "extra_info": True})


def test_async_dump_at_l2_is_refused_in_a_26x_config():
    with pytest.raises(ConfigError, match="async_dump: does not work at level 'L2'"):
        validate_config_dict({"dump_path": "d", "async_dump": True, "level": "L2", "extra_info": True})


def _files(folder):
    return sorted(p.name for p in folder.iterdir() if not p.name.startswith("."))  # not the spare journal


def test_extra_info_false_writes_dump_json_alone(tmp_path):
    writer = DumpWriter(tmp_path / "step0" / "rank", {"task": "statistics"}, extra_info=False)
    writer.add("Functional.relu.0.forward", {"input_args": []}, stack=["File a.py, line 1"], parent=None)
    writer.set_parent("Functional.relu.0.forward", "Module.fc.Linear.forward.0")
    writer.close()
    assert _files(tmp_path / "step0" / "rank") == ["dump.json"]
    kept = DumpWriter(tmp_path / "step1" / "rank", {"task": "statistics"})
    kept.add("Functional.relu.0.forward", {"input_args": []}, stack=["File a.py, line 1"], parent=None)
    kept.close()
    assert _files(tmp_path / "step1" / "rank") == ["construct.json", "dump.json", "stack.json"]


def test_proc_folder_is_an_option():
    from msprobe.core.recording.session import TaskSession

    class Debugger:
        framework = "pytorch"
        current_step = 2

        def __init__(self, config):
            self.config = config

        def current_rank(self):
            return None

    default = TaskSession(Debugger(DebuggerConfig(dump_path="d")))
    assert default.dump_dir.parts[-2:] == ("step2", "rank")
    proc = TaskSession(Debugger(DebuggerConfig(dump_path="d", folder_without_rank="proc")))
    assert proc.dump_dir.parts[-2:] == ("step2", f"proc{os.getpid()}")


@pytest.mark.parametrize("task", ["statistics", "tensor", "structure", "overflow_check", "run_ut"])
@pytest.mark.parametrize("suffix", ["json", "yaml"])
def test_config_init_format_26_writes_a_valid_26x_starter(tmp_path, task, suffix):
    output = tmp_path / f"config.{suffix}"
    result = CliRunner().invoke(cli, ["config", "init", "--format", "26", "--task", task, "-o", str(output)])
    assert result.exit_code == 0, result.output
    config = load_config(output)
    assert config.follows_26x and config.effective_risk_level == "FOCUS" and config.extra_info is True
    text = output.read_text()
    assert "risk_level" in text and "precision" in text
    if task == "run_ut":
        assert "acc_check" in text and config.task == "run_ut"
    validated = CliRunner().invoke(cli, ["config", "validate", str(output)])
    assert validated.exit_code == 0 and "valid:" in validated.output


def test_config_init_default_format_stays_1_2_2(tmp_path):
    output = tmp_path / "config.json"
    assert CliRunner().invoke(cli, ["config", "init", "-o", str(output)]).exit_code == 0
    raw = json.loads(output.read_text())
    assert not {"extra_info", "precision", "risk_level", "dump_enable"} & set(raw)
    assert "tensor_list" not in raw["statistics"] and not load_config(output).follows_26x
