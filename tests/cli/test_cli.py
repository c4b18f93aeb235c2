import json
import shutil
import sys

import click
import pytest
from click.testing import CliRunner
from repo_paths import REFERENCE_DUMPS, TEST_DATA

from msprobe.cli.main import cli
from msprobe.core.config import TASKS, load_config
from msprobe.core.hookspecs import hookimpl
from msprobe.core.plugins import PluginRegistry


def run(*args, **kwargs):
    return CliRunner().invoke(cli, list(args), catch_exceptions=False, prog_name="msprobe", **kwargs)


def test_version():
    result = run("--version")
    assert result.exit_code == 0 and result.output.startswith("msprobe ")


@pytest.mark.parametrize("command", [[], ["plugins"], ["config"], ["config", "init"], ["config", "validate"]])
def test_help_everywhere(command):
    result = run(*command, "--help")
    assert result.exit_code == 0 and "Usage: msprobe" in result.output


@pytest.mark.parametrize("task", TASKS)
@pytest.mark.parametrize("suffix", [".yaml", ".json"])
def test_config_init_writes_a_valid_config(tmp_path, task, suffix):
    out = tmp_path / f"config{suffix}"
    result = run("config", "init", "--task", task, "--framework", "pytorch", "-o", str(out))
    assert result.exit_code == 0, result.output
    config = load_config(out)
    assert config.task == task and config.framework == "pytorch"
    if suffix == ".yaml":
        assert out.read_text().count("# ") >= 6  # every field is explained
    else:
        json.loads(out.read_text())


def test_config_init_refuses_to_overwrite(tmp_path):
    out = tmp_path / "c.json"
    out.write_text("{}")
    result = run("config", "init", "-o", str(out))
    assert result.exit_code != 0 and "--force" in result.output
    assert out.read_text() == "{}"


def test_validate_reference_examples():
    files = sorted(str(p) for p in (TEST_DATA / "reference_configs").glob("*.json"))
    result = run("config", "validate", *files)
    assert result.exit_code == 0
    assert result.output.count("valid: ") == len(files)


def test_validate_broken_configs_one_line_each(tmp_path):
    bad = []
    for i, content in enumerate(['{"dump_path": "d", "bogus": 1}', '{"dump_path": "d", "step": ["9-1"]}', "{", "[]"]):
        path = tmp_path / f"bad{i}.json"
        path.write_text(content)
        bad.append(str(path))
    result = CliRunner().invoke(cli, ["config", "validate", *bad])
    assert result.exit_code == 2
    lines = [line for line in result.output.splitlines() if line]
    assert len(lines) == len(bad)
    for path, line in zip(bad, lines, strict=False):
        assert line.startswith(f"invalid: {path}: ")
    assert "Traceback" not in result.output


def test_unknown_framework_says_what_to_install():
    result = CliRunner().invoke(cli, ["-f", "mindspore", "plugins"], env={"MSPROBE_DISABLE_PLUGINS": "mindspore"})
    assert result.exit_code != 0
    assert "pip install msprobe-mindspore" in result.output


class FrameworkCommands:
    """A backend plugin contributing a framework-scoped run_ut, plus a shared command."""

    def __init__(self, name):
        from msprobe.core.backend import Backend

        self.backend = type("B", (Backend,), {"name": name, "import_name": "json"})()
        self.name = name

    @hookimpl
    def msprobe_register_backend(self):
        return self.backend

    @hookimpl
    def msprobe_cli_commands(self):
        name = self.name

        @click.command("run_ut")
        @click.option("-api_info", "--api_info", "api_info", required=True)
        def run_ut(api_info):
            click.echo(f"{name} run_ut {api_info} framework={click.get_current_context().obj['framework']}")

        return [run_ut]


@pytest.fixture
def two_backends(monkeypatch):
    reg = PluginRegistry(
        load_entry_points=False,
        extra_plugins=[("alpha", FrameworkCommands("alpha")), ("beta", FrameworkCommands("beta"))],
    )
    monkeypatch.setattr("msprobe.core.plugins._registry", reg)
    return reg


def test_dash_f_routes_to_the_framework_plugin_with_reference_spelling(two_backends):
    result = run("-f", "beta", "run_ut", "-api_info", "dump.json")
    assert result.output.strip() == "beta run_ut dump.json framework=beta"
    result = run("-f", "alpha", "acc_check", "-api_info", "x.json")  # the 26.x spelling
    assert result.output.strip() == "alpha run_ut x.json framework=alpha"


def test_ambiguous_command_needs_dash_f(two_backends):
    result = CliRunner().invoke(cli, ["run_ut", "-api_info", "a"])
    assert result.exit_code == 2 and "several frameworks (alpha, beta): choose one with -f" in result.output


def test_single_backend_command_needs_no_dash_f(monkeypatch):
    reg = PluginRegistry(load_entry_points=False, extra_plugins=[("alpha", FrameworkCommands("alpha"))])
    monkeypatch.setattr("msprobe.core.plugins._registry", reg)
    assert run("run_ut", "-api_info", "a").output.strip() == "alpha run_ut a framework=alpha"
    assert "run_ut" in run("--help").output


def test_plugins_lists_no_backend_when_none(monkeypatch):
    monkeypatch.setattr("msprobe.core.plugins._registry", PluginRegistry(load_entry_points=False))
    result = run("plugins")
    assert "No backend is installed" in result.output and "0 backend(s)" in result.output
    assert "statistics kernels: C, one pass (" in result.output  # CI builds msprobe-core's C kernels


@pytest.mark.parametrize(
    ("module", "arguments", "message"),
    [
        ("pyarrow", ["db", "build", "-i", "{tmp}", "-o", "{tmp}/store"], "msprobe db needs pyarrow: pip install"),
        ("duckdb", ["db", "query", "{tmp}", "SELECT 1"], "msprobe db needs duckdb: pip install"),
        ("ray", ["compare", "-i", "{tmp}/compare.json", "--engine", "ray"], "--engine ray needs Ray: pip install"),
    ],
)
def test_an_optional_extra_that_is_missing_is_named_in_one_line(tmp_path, monkeypatch, module, arguments, message):
    monkeypatch.setitem(sys.modules, module, None)  # import fails as when it is not installed
    npu, bench = tmp_path / "npu" / "step0", tmp_path / "bench" / "step0"
    for side in (npu, bench):  # a multi-rank layout: the ranks go to the engine
        for rank in (0, 1):
            shutil.copytree(REFERENCE_DUMPS / "pytorch" / "statistics_L1" / "step0" / "rank", side / f"rank{rank}")
    (tmp_path / "compare.json").write_text(json.dumps({"npu_path": str(npu), "bench_path": str(bench)}))
    result = CliRunner().invoke(cli, [a.format(tmp=tmp_path) for a in arguments])
    assert result.exit_code != 0 and message in result.output, result.output
    assert "Traceback" not in result.output


@pytest.mark.parametrize(
    "arguments",
    [
        ["compare", "-i", "{missing}/compare.json", "-o", "{out}"],
        ["config", "validate", "{missing}/config.json"],
        ["checkpoint_compare", "{bad}", "{bad}", "-o", "{out}/r.json"],
        ["config_check", "-c", "{bad}", "{bad}", "-o", "{out}/r.json"],
        ["api_precision_compare", "-npu", "{bad}", "-gpu", "{bad}", "-o", "{out}"],
        ["merge_result", "-i", "{missing}", "-o", "{out}", "-config", "{missing}/merge.yaml"],
        ["compare", "--no-such-option"],
    ],
)
def test_bad_input_exits_2_in_every_command(tmp_path, arguments):
    """2 is bad input or usage everywhere: a script tells it from 1, two runs that differ."""
    bad = tmp_path / "bad.safetensors"
    bad.write_bytes(b"not a checkpoint")
    places = {"missing": tmp_path / "missing", "out": tmp_path / "out", "bad": bad}
    result = CliRunner().invoke(cli, [argument.format(**places) for argument in arguments])
    assert result.exit_code == 2, result.output
    assert "Traceback" not in result.output


def test_an_internal_error_exits_3(tmp_path, monkeypatch, capsys):
    from msprobe.cli.main import main
    from msprobe.core.compare import run as compare_run

    def broken(*_arguments, **_options):
        raise KeyError("a bug")

    monkeypatch.setattr(compare_run, "run_compare_json", broken)
    spec = tmp_path / "compare.json"
    spec.write_text(json.dumps({"npu_path": "a", "bench_path": "b"}))
    with pytest.raises(SystemExit) as ended:
        main(["compare", "-i", str(spec), "-o", str(tmp_path / "out")])
    assert ended.value.code == 3
    assert "internal error KeyError" in capsys.readouterr().err


@pytest.mark.parametrize("way", ["never", "always"])  # the in-memory compare and the block compare
def test_a_full_disk_is_one_line_naming_the_file_and_leaves_no_result(tmp_path, monkeypatch, way):
    import errno

    from repo_paths import REFERENCE_DUMPS

    from msprobe.core.compare import pipeline

    dump = REFERENCE_DUMPS / "pytorch" / "statistics_L1" / "step0" / "rank" / "dump.json"
    real = pipeline.os.fdopen

    class Full:  # a result file on a full disk: its writes fail as the OS's do, naming no file
        def __init__(self, handle):
            self.handle = handle

        def write(self, _data):
            raise OSError(errno.ENOSPC, "No space left on device")

        def __getattr__(self, name):
            return getattr(self.handle, name)

        def __enter__(self):
            return self

        def __exit__(self, *exc):
            self.handle.close()

    monkeypatch.setattr(pipeline.os, "fdopen", lambda *a, **k: Full(real(*a, **k)))
    monkeypatch.setenv("MSPROBE_COMPARE_STREAM", way)
    spec = tmp_path / "compare.json"
    spec.write_text(json.dumps({"npu_path": str(dump), "bench_path": str(dump)}))
    result = CliRunner().invoke(cli, ["compare", "-i", str(spec), "-o", str(tmp_path / "out")])
    assert result.exit_code == 2, result.output
    assert "No space left on device" in result.output and ".csv" in result.output and "internal" not in result.output
    assert not list((tmp_path / "out").glob("*.csv")) and not list((tmp_path / "out").glob(".*.tmp"))


def test_a_reader_that_closes_the_pipe_early_gets_no_error_message(tmp_path):
    """`msprobe compare ... | head -1`: the command's output goes to a pipe its reader has closed. It exited 2
    with "Error: Broken pipe"; it ends quietly, as a process SIGPIPE ends (128 + 13)."""
    import subprocess
    import sys

    from repo_paths import REFERENCE_DUMPS

    folder = REFERENCE_DUMPS / "pytorch" / "statistics_L1" / "step0"
    spec = tmp_path / "compare.json"
    spec.write_text(json.dumps({"npu_path": str(folder), "bench_path": str(folder)}))
    command = [sys.executable, "-m", "msprobe.cli.main", "compare", "-i", str(spec), "-o", str(tmp_path / "out")]
    process = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    process.stdout.close()  # the reader is gone before the first line
    stderr = process.stderr.read().decode()
    assert process.wait(timeout=120) == 141, stderr
    assert "Error" not in stderr and "Traceback" not in stderr


def test_a_file_size_limit_is_said_with_the_file_s_name(tmp_path):
    """`prlimit --fsize`: a result file cannot be written whole. The error said "File too large", no file; it
    names the file now, exit 2, and leaves no half-written result."""
    import resource
    import subprocess
    import sys

    from repo_paths import REFERENCE_DUMPS

    dump = REFERENCE_DUMPS / "pytorch" / "statistics_L1" / "step0" / "rank" / "dump.json"
    spec = tmp_path / "compare.json"
    spec.write_text(json.dumps({"npu_path": str(dump), "bench_path": str(dump)}))
    out = tmp_path / "out"
    command = [sys.executable, "-m", "msprobe.cli.main", "compare", "-i", str(spec), "-o", str(out)]

    def limited() -> None:
        resource.setrlimit(resource.RLIMIT_FSIZE, (4096, 4096))

    finished = subprocess.run(command, capture_output=True, text=True, preexec_fn=limited, timeout=120)
    assert finished.returncode == 2 and "Traceback" not in finished.stderr, finished.stderr
    assert f"{out}/" in finished.stderr and "File too large" in finished.stderr, finished.stderr
    assert not [path for path in out.rglob("*") if path.is_file() and path.name.startswith("compare_result")]


@pytest.mark.parametrize(
    ("args", "words", "where"),
    [
        (["compare", "--nope"], "No such option '--nope'", "msprobe compare --help"),
        (["nosuch"], "No such command 'nosuch'", "msprobe --help"),
        (["config", "init", "--task", "juggling"], "Invalid value for '--task'", "msprobe config init --help"),
    ],
)
def test_a_usage_error_is_one_line(args, words, where):
    """docs/cli.md: errors are one line on stderr, exit 2; the usage is one --help away."""
    result = CliRunner().invoke(cli, args, prog_name="msprobe")
    assert result.exit_code == 2
    (line,) = result.stderr.splitlines()
    assert line.startswith(f"Error: {words}") and line.endswith(f"(see '{where}')")
    assert result.stdout == ""


def test_help_texts_show_no_markup():
    """Help is read in a terminal: no reStructuredText double backquotes."""
    for args in (["run", "--help"], ["compare", "--help"], ["--help"]):
        result = run(*args)
        assert result.exit_code == 0 and "``" not in result.output, args
