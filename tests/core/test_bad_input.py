"""Bad input anywhere gets one line naming the file, never "internal error" or a traceback."""

import json
import subprocess
import sys

import numpy as np
import pytest
from click.testing import CliRunner
from repo_paths import REFERENCE_DUMPS

from msprobe.cli.main import cli

DUMP = REFERENCE_DUMPS / "pytorch" / "statistics_L1" / "step0" / "rank" / "dump.json"


def _compare(tmp_path, npu=DUMP, config=None):
    if config is None:
        config = tmp_path / "compare.json"
        config.write_text(json.dumps({"npu_path": str(npu), "bench_path": str(DUMP)}))
    return CliRunner().invoke(cli, ["compare", "-i", str(config), "-o", str(tmp_path / "out")])


def _one_clear_line(result, *expected):
    assert result.exit_code != 0, result.output
    assert "internal error" not in result.output and "Traceback" not in result.output, result.output
    for text in expected:
        assert text in result.output, result.output


def test_a_compare_json_that_is_not_utf8(tmp_path):
    config = tmp_path / "compare.json"
    config.write_bytes(b'\xff\xfe{"npu_path": 1}')
    _one_clear_line(_compare(tmp_path, config=config), str(config), "not UTF-8")


def test_a_folder_given_for_a_file(tmp_path):
    words = "is a folder where a file (compare.json) should be"
    _one_clear_line(_compare(tmp_path, config=tmp_path), str(tmp_path), words)


def _msprobe(*arguments: str, cwd) -> subprocess.CompletedProcess:
    """In a process of its own, with a time limit: a reader that blocks on a FIFO must fail the test, not hang it."""
    command = [sys.executable, "-m", "msprobe.cli.main", *arguments]
    return subprocess.run(command, capture_output=True, text=True, timeout=60, cwd=cwd)


@pytest.mark.parametrize("where", ["compare.json", "dump.json", "/dev/zero", "tensor file"])
def test_a_fifo_or_a_device_is_refused_by_name_not_read(tmp_path, where):
    import os

    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    config = tmp_path / "compare.json"
    if where == "compare.json":
        config = fifo
        arguments = ["compare", "-i", str(config), "-o", str(tmp_path / "out")]
    elif where == "tensor file":
        arguments = ["parse", "pt", "-n", str(fifo)]
    else:
        npu = str(fifo) if where == "dump.json" else "/dev/zero"
        config.write_text(json.dumps({"npu_path": npu, "bench_path": str(DUMP)}))
        arguments = ["compare", "-i", str(config), "-o", str(tmp_path / "out")]
    finished = _msprobe(*arguments, cwd=tmp_path)
    output = finished.stdout + finished.stderr
    assert finished.returncode == 2 and "Traceback" not in output, output
    assert "is not a regular file" in output and (str(fifo) in output or "/dev/zero" in output), output


def test_json_nested_a_hundred_thousand_deep(tmp_path):
    deep = tmp_path / "deep.json"
    deep.write_text("[" * 100_000 + "]" * 100_000)
    _one_clear_line(_compare(tmp_path, npu=deep), str(deep), "nested too deeply")
    config = tmp_path / "config.json"
    config.write_text("[" * 100_000 + "]" * 100_000)
    result = CliRunner().invoke(cli, ["config", "validate", str(config)])
    _one_clear_line(result, "config.json", "nested too deeply")


def test_a_statistic_beyond_float_range(tmp_path):
    data = json.loads(DUMP.read_text())
    data["data"]["Functional.relu.0.forward"]["output"][0]["Max"] = 10**400
    big = tmp_path / "big.json"
    big.write_text(json.dumps(data))
    _one_clear_line(_compare(tmp_path, npu=big), str(big), "field 'Max': expected a number")


def test_a_npy_of_strings(tmp_path):
    np.save(tmp_path / "s.npy", np.array(["a", "b"]))
    result = CliRunner().invoke(cli, ["parse", "pt", "-n", str(tmp_path / "s.npy")])
    _one_clear_line(result, "s.npy", "not numbers")


def test_the_parse_shell_survives_bad_lines(tmp_path):
    np.save(tmp_path / "s.npy", np.array(["a", "b"]))
    np.save(tmp_path / "n.npy", np.array([1.0, np.nan], dtype=np.float32))
    lines = f'pt -n "unclosed\npt -n {tmp_path / "s.npy"}\nnonsense\npt -n {tmp_path / "n.npy"}\nexit\n'
    result = CliRunner().invoke(cli, ["parse"], input=lines)
    assert result.exit_code == 0 and "Traceback" not in result.output
    assert "No closing quotation" in result.output and "not numbers" in result.output
    assert "[Max: nan]" in result.output  # the last line still ran, and a nan is not hidden


@pytest.mark.parametrize("values", [[1.0, np.nan, 3.0], [np.inf, 1.0]])
def test_parse_pt_shows_nonfinite_values(tmp_path, values):
    np.save(tmp_path / "v.npy", np.array(values, dtype=np.float32))
    result = CliRunner().invoke(cli, ["parse", "pt", "-n", str(tmp_path / "v.npy")])
    assert result.exit_code == 0 and ("nan" in result.output or "inf" in result.output), result.output


@pytest.mark.parametrize("stream", ["always", "never"])
@pytest.mark.parametrize("where", ["name", "dtype"])
def test_a_lone_surrogate_escape_in_dump_json(tmp_path, monkeypatch, stream, where):
    monkeypatch.setenv("MSPROBE_COMPARE_STREAM", stream)
    text = DUMP.read_bytes()
    target = b'"Functional.relu.0.forward"' if where == "name" else b'"torch.float32"'
    at = text.index(target) + 5
    bad = tmp_path / "bad.json"
    bad.write_bytes(text[:at] + b"\\udc00" + text[at:])
    result = _compare(tmp_path, npu=bad)
    _one_clear_line(result, str(bad), f"at byte {at}: \\udc00 is half of a UTF-16 pair")
    assert not (tmp_path / "out").exists() or not any((tmp_path / "out").iterdir())


def test_a_yaml_alias_bomb_is_refused_at_once(tmp_path):
    """A kilobyte of YAML aliases (each level nine of the one below) took 65 s and 3.5 GB given to -dm, and was
    then accepted. No mapping or config needs aliases: they are refused, in one line naming the file."""
    levels = ["a: &a [x, x, x, x, x, x, x, x, x]"]
    for level in range(1, 9):
        below = chr(ord("a") + level - 1)
        levels.append(f"{chr(ord('a') + level)}: &{chr(ord('a') + level)} [" + ", ".join([f"*{below}"] * 9) + "]")
    bomb = tmp_path / "bomb.yaml"
    bomb.write_text("\n".join(levels) + "\n")
    config = tmp_path / "compare.json"
    config.write_text(json.dumps({"npu_path": str(DUMP), "bench_path": str(DUMP)}))
    result = CliRunner().invoke(cli, ["compare", "-i", str(config), "-o", str(tmp_path / "out"), "-dm", str(bomb)])
    _one_clear_line(result, "bomb.yaml", "aliases (*name) are not allowed")
    assert result.exit_code == 2
    config_file = tmp_path / "config.yaml"
    config_file.write_text("task: statistics\ndump_path: &p ./d\nlevel: L1\nother: *p\n")
    validated = CliRunner().invoke(cli, ["config", "validate", str(config_file)])
    _one_clear_line(validated, "config.yaml", "aliases (*name) are not allowed")
