import json

import pytest
from repo_paths import TEST_DATA

from msprobe.core.config import DebuggerConfig, load_config, parse_id_list
from msprobe.core.errors import ConfigError

REFERENCE_CONFIGS = sorted((TEST_DATA / "reference_configs").glob("*.json"))


def write(tmp_path, data, name="config.json"):
    path = tmp_path / name
    path.write_text(data if isinstance(data, str) else json.dumps(data), encoding="utf-8")
    return path


@pytest.mark.parametrize("path", REFERENCE_CONFIGS, ids=lambda p: p.stem)
def test_every_reference_example_config_validates(path):
    raw = json.loads(path.read_text())
    config = load_config(path)
    assert config.task == raw["task"]
    if "level" in raw:
        assert config.level == raw["level"]


def test_reference_examples_are_all_there():
    assert len(REFERENCE_CONFIGS) >= 19


def test_defaults_match_the_reference_default_config():
    config = DebuggerConfig(dump_path="./dump_path")
    assert (config.task, config.level, config.rank, config.step) == ("statistics", "L1", [], [])
    assert config.async_dump is False and config.enable_dataloader is False
    assert config.statistics.summary_mode == "statistics"
    assert config.tensor.data_mode == ["all"] and config.tensor.file_format == "npy"
    assert config.overflow_check.overflow_nums == 1 and config.overflow_check.check_mode == "all"
    assert config.run_ut.error_data_path == "./"
    assert config.grad_probe.grad_level == "L1" and config.grad_probe.bounds == [-1, 0, 1]
    fb = config.free_benchmark
    assert (fb.fuzz_device, fb.pert_mode, fb.handler_type, fb.fuzz_stage) == (
        "npu",
        "improve_precision",
        "check",
        "forward",
    )
    assert (fb.if_preheat, fb.preheat_step, fb.max_sample) == (False, 15, 20)


@pytest.mark.parametrize(
    "values, expected",
    [([], []), ([0, "4-6"], [0, 4, 5, 6]), (["3"], [3]), ([2, 1, 2], [1, 2]), (["0-0"], [0]), (None, [])],
)
def test_id_lists_expand_ranges(values, expected):
    assert parse_id_list(values) == expected


@pytest.mark.parametrize("bad", [["6-4"], [-1], ["a-b"], ["1-2-3"], [1.5], [True], "x"])
def test_id_lists_reject_bad_items(bad):
    with pytest.raises(ValueError):
        parse_id_list(bad)


def test_yaml_is_accepted(tmp_path):
    path = write(tmp_path, "task: tensor\ndump_path: ./out\nstep: [0, '2-3']\ntensor:\n  list: [relu]\n", "c.yaml")
    config = load_config(path)
    assert config.task == "tensor" and config.step == [0, 2, 3] and config.api_list == ["relu"]


def test_keyword_overrides_win_over_the_file(tmp_path):
    path = write(tmp_path, {"task": "statistics", "dump_path": "./a", "level": "L1", "step": [5]})
    config = load_config(path, task="tensor", dump_path="./b", level="mix", step=[1, "3-4"])
    assert (config.task, config.dump_path, config.level, config.step) == ("tensor", "./b", "mix", [1, 3, 4])


def test_no_file_means_reference_defaults():
    assert load_config().dump_path == "./dump_path"


def test_run_ut_receiver_needs_no_dump_path(tmp_path):
    assert load_config(write(tmp_path, {"task": "run_ut", "run_ut": {"is_online": True}})).dump_path is None


BROKEN = {
    "unknown key": ({"task": "statistics", "dump_path": "d", "bogus": 1}, "bogus: unknown key"),
    "unknown nested key": ({"dump_path": "d", "statistics": {"lst": []}}, "statistics.lst: unknown key"),
    "wrong type": ({"dump_path": "d", "async_dump": [1]}, "async_dump:"),
    "bad range": ({"dump_path": "d", "step": [0, "6-4"]}, "step: bad range '6-4'"),
    "bad rank": ({"dump_path": "d", "rank": ["x"]}, "rank: bad range 'x'"),
    "missing dump_path": ({"task": "tensor"}, "dump_path: required field is missing"),
    "bad task": ({"task": "dump", "dump_path": "d"}, "task:"),
    "bad level": ({"level": "L3", "dump_path": "d"}, "level:"),
    "bad summary_mode": ({"dump_path": "d", "statistics": {"summary_mode": "crc"}}, "statistics.summary_mode:"),
    "scope not a pair": ({"dump_path": "d", "tensor": {"scope": ["a"]}}, "tensor.scope: must hold exactly two"),
    "bad data_mode": ({"dump_path": "d", "tensor": {"data_mode": ["sideways"]}}, "tensor.data_mode[0]:"),
    "all combined": ({"dump_path": "d", "tensor": {"data_mode": ["all", "input"]}}, "tensor.data_mode: 'all'"),
    "overflow_nums zero": ({"dump_path": "d", "overflow_check": {"overflow_nums": 0}}, "overflow_check.overflow_nums:"),
    "fix with backward": (
        {"dump_path": "d", "free_benchmark": {"handler_type": "fix", "fuzz_stage": "backward"}},
        "free_benchmark: handler_type 'fix'",
    ),
    "scope and list": (
        {"dump_path": "d", "free_benchmark": {"scope": ["a"], "list": ["b"]}},
        "free_benchmark: 'scope'",
    ),
    "bounds unsorted": ({"dump_path": "d", "grad_probe": {"bounds": [1, 0]}}, "grad_probe.bounds: must be strictly"),
    "async tensor without list": ({"dump_path": "d", "task": "tensor", "async_dump": True}, "async_dump:"),
    "top level list": ([1, 2], "top level must be an object"),
    "port out of range": ({"dump_path": "d", "tensor": {"port": 70000}}, "tensor.port:"),
    "declared split by a word": (
        {"dump_path": "d", "tensor_parallel": {"modules": {"*.fc2": {"weight": "columns"}}}},
        "tensor_parallel.modules.*.fc2.weight:",
    ),
    "rerun threshold not positive": ({"dump_path": "d", "rerun": {"loss_threshold": 0}}, "rerun.loss_threshold:"),
    "rerun switch a word": ({"dump_path": "d", "rerun": {"enabled": "sometimes"}}, "rerun.enabled:"),
    "declared calls unknown": (
        {"dump_path": "d", "tensor_parallel": {"modules": {"fc2": {"calls": "sum"}}}},
        "tensor_parallel.modules.fc2.calls:",
    ),
}


@pytest.mark.parametrize("case", sorted(BROKEN))
def test_broken_configs_give_one_line_naming_file_and_field(tmp_path, case):
    data, expected = BROKEN[case]
    path = write(tmp_path, data)
    with pytest.raises(ConfigError) as info:
        load_config(path)
    message = str(info.value)
    assert message.startswith(str(path) + ": ")
    assert expected in message
    assert "\n" not in message


@pytest.mark.parametrize(
    "content, expected",
    [('{"task": "statistics",', "invalid JSON at line 1"), ("", "invalid JSON"), ("task: [", "invalid YAML")],
)
def test_unparsable_files(tmp_path, content, expected):
    path = write(tmp_path, content, "c.yaml" if "YAML" in expected else "c.json")
    with pytest.raises(ConfigError, match=expected):
        load_config(path)


def test_missing_file_is_named(tmp_path):
    with pytest.raises(ConfigError, match="nope.json: file not found"):
        load_config(tmp_path / "nope.json")


def test_bad_keyword_override_names_the_arguments():
    with pytest.raises(ConfigError, match="PrecisionDebugger arguments: level:"):
        load_config(None, level="L9")


def test_a_range_of_any_length_is_kept_as_an_interval(tmp_path):
    """ "0-99999999999" used to be expanded into a list (MemoryError); now two numbers answer for it."""
    import tracemalloc

    tracemalloc.start()
    config = load_config(write(tmp_path, {"dump_path": "./a", "step": ["0-99999999999", 5], "rank": ["2-3"]}))
    peak = tracemalloc.get_traced_memory()[1]
    tracemalloc.stop()
    assert peak < 5_000_000  # bytes: a list of the steps would take terabytes
    assert 99_999_999_999 in config.step and 100_000_000_000 not in config.step and len(config.step) == 10**11
    assert 3 in config.rank and 4 not in config.rank and 1 not in config.rank
    assert config.model_dump()["step"] == ["0-99999999999"]  # merged, written back as a range


def test_a_bad_name_regex_is_refused_when_the_config_is_read(tmp_path):
    path = write(tmp_path, {"dump_path": "./a", "statistics": {"list": ["name-regex(conv[)"]}})
    with pytest.raises(ConfigError, match=r"statistics\.list.*not a valid regular expression"):
        load_config(path)


def test_a_config_larger_than_4_mib_is_refused_before_it_is_parsed(tmp_path):
    path = tmp_path / "config.json"
    path.write_text(json.dumps({"task": "statistics", "dump_path": "out", "statistics": {"list": ["x" * 1000] * 5000}}))
    with pytest.raises(ConfigError, match=r"config\.json: is larger than a config may be \(4 MiB\)"):
        load_config(path)


def test_a_huge_bad_value_is_not_echoed_whole(tmp_path):
    path = tmp_path / "config.json"
    path.write_text(json.dumps({"task": "statistics", "dump_path": "out", "step": ["x" * 1_000_000]}))
    with pytest.raises(ConfigError) as raised:
        load_config(path)
    assert "step" in str(raised.value) and len(str(raised.value)) < 1000


def test_many_problems_are_named_a_few_at_a_time(tmp_path):
    path = tmp_path / "config.json"
    path.write_text(json.dumps({"task": "statistics", "dump_path": "out", **{f"unknown{n}": 1 for n in range(500)}}))
    with pytest.raises(ConfigError) as raised:
        load_config(path)
    message = str(raised.value)
    assert "unknown0: unknown key" in message and "and 490 more problems" in message and len(message) < 2000
