"""msprobe run's start-up, framework-free: a start-up function runs once, right after its framework imports."""

import json
import os
import subprocess
import sys
import textwrap

import pytest
from click.testing import CliRunner

from msprobe.cli.main import cli
from msprobe.core.autostart import BOOT_FOLDER, CONFIG_VARIABLE, STARTERS_VARIABLE, job_environment


def _boot_module():
    """boot/sitecustomize.py loaded under another name: it then installs nothing."""
    import importlib.util

    spec = importlib.util.spec_from_file_location("msprobe_boot_under_test", BOOT_FOLDER / "sitecustomize.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def parse_starters(text):
    return _boot_module().parse_starters(text)


def test_the_job_environment_puts_boot_first_and_keeps_the_users_path(tmp_path):
    env = job_environment(tmp_path / "c.json", {"torch": "a.b:begin"}, {"PYTHONPATH": "/x:/y", "HOME": "/h"})
    assert env["PYTHONPATH"].split(os.pathsep) == [str(BOOT_FOLDER), "/x", "/y"]
    assert env[CONFIG_VARIABLE] == str((tmp_path / "c.json").resolve())
    assert parse_starters(env[STARTERS_VARIABLE]) == {"torch": "a.b:begin"} and env["HOME"] == "/h"


@pytest.mark.parametrize(
    ("given", "kept"),
    [(":/x", ["", "/x"]), ("/x::/y", ["/x", "", "/y"]), ("", []), (None, [])],
    ids=["leading", "inner", "empty", "unset"],
)
def test_an_empty_pythonpath_entry_the_working_directory_is_kept(tmp_path, given, kept):
    """An empty entry of PYTHONPATH is the working directory to Python: dropped, a script's module beside the
    working directory no longer imported under msprobe run."""
    environ = {} if given is None else {"PYTHONPATH": given}
    env = job_environment(tmp_path / "c.json", {"torch": "a.b:begin"}, environ)
    assert env["PYTHONPATH"].split(os.pathsep) == [str(BOOT_FOLDER), *kept]


def test_the_script_s_own_sitecustomize_is_what_it_imports(tmp_path):
    """msprobe's sitecustomize runs the user's after it; `import sitecustomize` then gives the user's module."""
    (tmp_path / "sitecustomize.py").write_text("MARK = 'the user s'\n")
    config = tmp_path / "config.json"
    config.write_text("{}")
    env = job_environment(config, {"fakefw": "starter:begin"}, {**os.environ, "PYTHONPATH": str(tmp_path)})
    code = "import sitecustomize; print(getattr(sitecustomize, 'MARK', sitecustomize.__file__))"
    done = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, cwd=tmp_path)
    assert done.returncode == 0 and done.stdout.strip() == "the user s", done.stdout + done.stderr


def test_malformed_starters_are_left_out():
    assert parse_starters("torch=a.b:begin;junk;=x:y;ms=nocolon; mindspore = m.s:go ") == {
        "torch": "a.b:begin", "mindspore": "m.s:go",
    }  # fmt: skip


def _run(tmp_path, code):
    (tmp_path / "fakefw.py").write_text("import time\nREADY = True\n")
    (tmp_path / "starter.py").write_text(
        textwrap.dedent("""
        import sys, json
        def begin(config_path):
            fw = sys.modules["fakefw"]
            with open(config_path + ".log", "a") as log:
                log.write(json.dumps({"ready": getattr(fw, "READY", False)}) + "\\n")
    """)
    )
    config = tmp_path / "config.json"
    config.write_text("{}")
    env = job_environment(config, {"fakefw": "starter:begin"}, {**os.environ, "PYTHONPATH": str(tmp_path)})
    done = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    log = tmp_path / "config.json.log"
    return [json.loads(line) for line in log.read_text().splitlines()] if log.exists() else [], done.stdout


def test_the_starter_runs_once_after_the_framework_finished_importing(tmp_path):
    calls, _ = _run(tmp_path, "import fakefw\nimport importlib; importlib.reload(fakefw)\nimport fakefw")
    assert calls == [{"ready": True}]


def test_a_process_that_never_imports_the_framework_runs_nothing(tmp_path):
    code = "import sys; print('starter' in sys.modules, 'fakefw' in sys.modules, 'msprobe.core' in sys.modules)"
    calls, out = _run(tmp_path, code)
    assert calls == [] and out.strip() == "False False False"  # msprobe itself is not imported either


def test_without_a_backend_that_starts_by_itself_msprobe_run_says_what_to_install(tmp_path, monkeypatch):
    config = tmp_path / "config.json"
    config.write_text(json.dumps({"task": "statistics", "dump_path": str(tmp_path / "d"), "framework": "mindspore"}))
    result = CliRunner().invoke(cli, ["run", "-c", str(config), "--", sys.executable, "-c", "pass"])
    assert result.exit_code == 2
    assert "msprobe run needs the mindspore backend" in result.output


def test_the_boot_module_reads_the_variables_the_command_sets():
    boot = _boot_module()
    assert (boot.CONFIG_VARIABLE, boot.STARTERS_VARIABLE) == (CONFIG_VARIABLE, STARTERS_VARIABLE)
