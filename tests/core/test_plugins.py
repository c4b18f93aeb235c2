from importlib import metadata

import pytest

from msprobe.core import hookspecs, plugins
from msprobe.core.backend import Backend, CompareMetric
from msprobe.core.errors import BackendError
from msprobe.core.hookspecs import hookimpl
from msprobe.core.plugins import PluginRegistry


class FakeBackend(Backend):
    name = "fakefw"
    aliases = ("ff",)
    import_name = "json"  # always importable


class BackendPlugin:
    @hookimpl
    def msprobe_register_backend(self):
        return FakeBackend()


class MetricPlugin:
    @hookimpl
    def msprobe_compare_metrics(self):
        return [CompareMetric("Ones", lambda a, b: 1.0)]


class RaisingPlugin:
    @hookimpl
    def msprobe_compare_metrics(self):
        raise RuntimeError("boom")

    @hookimpl
    def msprobe_register_backend(self):
        raise RuntimeError("no backend today")


def fake_entry_points(monkeypatch, *pairs):
    """The installed entry points replaced by ``pairs``, msprobe's own packages' kept (the CLI's commands)."""
    own = [
        point
        for point in metadata.entry_points(group=hookspecs.ENTRY_POINT_GROUP)
        if point.dist is not None and point.dist.name in plugins.OWN_DISTRIBUTIONS
    ]
    points = [*own, *(metadata.EntryPoint(name, value, hookspecs.ENTRY_POINT_GROUP) for name, value in pairs)]

    def entry_points(group=None, **_kw):
        return points if group == hookspecs.ENTRY_POINT_GROUP else []

    monkeypatch.setattr(metadata, "entry_points", entry_points)


def test_every_hookspec_has_a_docstring():
    specs = [getattr(hookspecs, name) for name in dir(hookspecs) if name.startswith("msprobe_")]
    assert len(specs) >= 9
    for spec in specs:
        assert spec.__doc__ and len(spec.__doc__.strip()) > 20, spec.__name__


def test_the_plugins_page_documents_every_hook_and_only_those():
    import re

    from repo_paths import REPO_ROOT

    page = (REPO_ROOT / "docs" / "plugins.md").read_text()
    specs = {name for name in dir(hookspecs) if name.startswith("msprobe_") and callable(getattr(hookspecs, name))}
    documented = set(re.findall(r"`(msprobe_[a-z_]+)\(", page))
    assert documented == specs


def test_a_plugin_that_raises_is_recorded_and_the_others_keep_working():
    registry = PluginRegistry(
        load_entry_points=False,
        extra_plugins=[("good", BackendPlugin()), ("metrics", MetricPlugin()), ("bad", RaisingPlugin())],
        default_plugins=(),
    )
    assert list(registry.backends()) == ["fakefw"]
    assert [metric.name for metric in registry.compare_metrics()] == ["Ones"]
    infos = {info.name: info for info in registry.plugin_infos()}
    assert any("no backend today" in error for error in infos["bad"].errors)
    assert any("boom" in error for error in infos["bad"].errors)
    assert infos["metrics"].metrics == ["Ones"] and not infos["good"].errors


def test_a_plugin_that_fails_to_import_is_skipped(monkeypatch):
    fake_entry_points(monkeypatch, ("broken", "no_such_module_for_msprobe_tests"), ("json", "json"))
    registry = PluginRegistry()
    infos = {info.name: info for info in registry.plugin_infos()}
    assert infos["broken"].errors and infos["broken"].errors[0].startswith("import: ModuleNotFoundError")
    assert not infos["broken"].loaded
    assert infos["json"].loaded  # a module with no hooks is a valid, if useless, plugin


def test_disabled_plugins_are_not_loaded(monkeypatch):
    fake_entry_points(monkeypatch, ("fake", "tests_fake_backend_plugin"))
    monkeypatch.setenv("MSPROBE_DISABLE_PLUGINS", "other, fake")
    registry = PluginRegistry()
    assert registry.infos["fake"].disabled
    assert registry.backends() == {}


def test_find_backend_by_alias_and_unknown_names():
    registry = PluginRegistry(load_entry_points=False, extra_plugins=[("good", BackendPlugin())])
    assert registry.find_backend("FF").name == "fakefw"
    with pytest.raises(BackendError, match="framework 'mindspore' is not installed: pip install msprobe-mindspore"):
        registry.find_backend("ms")
    with pytest.raises(BackendError, match="unknown framework 'jax'"):
        registry.find_backend("jax")


def test_non_backend_return_value_is_an_error_not_a_crash():
    class Liar:
        @hookimpl
        def msprobe_register_backend(self):
            return "pytorch"

    registry = PluginRegistry(load_entry_points=False, extra_plugins=[("liar", Liar())])
    assert registry.backends() == {}
    assert "not a Backend" in registry.infos["liar"].errors[0]


class NotAList:
    @hookimpl
    def msprobe_compare_metrics(self):
        return CompareMetric("Single", lambda a, b: 2.0)  # should have been [CompareMetric(...)]


class WrongItem:
    @hookimpl
    def msprobe_compare_metrics(self):
        return ["not a metric", CompareMetric("Kept", lambda a, b: 3.0)]


def test_a_malformed_result_is_that_plugins_error_and_the_others_keep_their_metrics():
    registry = PluginRegistry(
        load_entry_points=False,
        extra_plugins=[("good", MetricPlugin()), ("single", NotAList()), ("mixed", WrongItem())],
        default_plugins=(),
    )
    assert sorted(metric.name for metric in registry.compare_metrics()) == ["Kept", "Ones"]
    infos = {info.name: info for info in registry.plugin_infos()}
    assert "returned CompareMetric, not a list" in infos["single"].errors[0]
    assert "an item is str, not CompareMetric" in infos["mixed"].errors[0]
    assert not infos["good"].errors


def test_plugins_lists_framework_specific_perturbations():
    from msprobe.core.backend import Perturbation

    class Perturbations:
        @hookimpl
        def msprobe_free_benchmark_perturbations(self):
            return [Perturbation("double", lambda *args, **kwargs: None, framework="fakefw")]

    registry = PluginRegistry(load_entry_points=False, extra_plugins=[("pert", Perturbations())])
    infos = {info.name: info for info in registry.plugin_infos()}
    assert infos["pert"].perturbations == ["double"]  # was dropped: the listing asked for framework None
    assert "double" not in registry.perturbations(framework="otherfw")


def test_disabled_backends_are_said_to_be_disabled_and_unknown_names_warned(monkeypatch):
    from click.testing import CliRunner

    from msprobe.cli.main import cli
    from msprobe.core import plugins

    fake_entry_points(monkeypatch, ("fakefw", "tests.nothing:plugin"))
    monkeypatch.setenv("MSPROBE_DISABLE_PLUGINS", "fakefw,no-such-plugin")
    plugins.reset_registry()
    try:
        result = CliRunner().invoke(cli, ["plugins"])
    finally:
        plugins.reset_registry()
    assert "No backend is enabled (fakefw disabled by MSPROBE_DISABLE_PLUGINS)" in result.output, result.output
    assert "No backend is installed" not in result.output
    assert "msprobe: warning: MSPROBE_DISABLE_PLUGINS names 'no-such-plugin', which matches no plugin" in result.stderr


def test_a_failing_metric_warns_once_not_once_per_row(tmp_path, caplog):
    import json

    import numpy as np

    from msprobe.core.compare.pipeline import compare_dumps
    from msprobe.core.compare.tables import tensor_loader
    from msprobe.core.dump.reader import read_dump
    from msprobe.core.tensor_files import load_npy

    folder = tmp_path / "d"
    (folder / "dump_tensor_data").mkdir(parents=True)
    data = {}
    for index in range(5):
        name = f"Mint.abs.{index}.forward"
        np.save(folder / "dump_tensor_data" / f"{name}.output.0.npy", np.ones(3, dtype=np.float32))
        summary = {"type": "mindspore.Tensor", "dtype": "Float32", "shape": [3], "Max": 1.0}
        data[name] = {
            "input_args": [],
            "input_kwargs": {},
            "output": [{**summary, "data_name": f"{name}.output.0.npy"}],
        }
    (folder / "dump.json").write_text(
        json.dumps({"task": "tensor", "level": "L1", "framework": "mindspore", "data": data})
    )
    dump = read_dump(folder)

    def broken(actual, expected):
        raise ValueError("nope")

    metric = CompareMetric("Broken", broken)
    result = compare_dumps(dump, dump, load=tensor_loader({".npy": load_npy}), extra_metrics=(metric,))
    assert list(result.table["Broken"]) == ["N/A"] * 5
    assert caplog.text.count("compare metric Broken failed") == 1


class Misspelt:
    @hookimpl
    def msprobe_compare_metric(self):  # one letter short of the hook's name
        return [CompareMetric("Never", lambda a, b: 0.0)]


def test_a_misspelt_hook_name_is_reported_by_plugin():
    registry = PluginRegistry(load_entry_points=False, extra_plugins=[("typo", Misspelt())])
    infos = {info.name: info for info in registry.plugin_infos()}
    assert any("'msprobe_compare_metric' is no msprobe hook" in error for error in infos["typo"].errors)


def _cli_with(monkeypatch, *plugins):
    import click

    from msprobe.cli import main as cli_main

    registry = PluginRegistry(load_entry_points=False, extra_plugins=list(plugins))
    monkeypatch.setattr(cli_main, "get_registry", lambda: registry)
    monkeypatch.setattr(cli_main, "_WARNED", set())
    return cli_main.cli, click


def _commands_plugin(*commands):
    class Commands:
        @hookimpl
        def msprobe_cli_commands(self):
            return list(commands)

    return Commands()


def test_command_collisions_are_warned_and_the_built_in_wins(monkeypatch):
    import click
    from click.testing import CliRunner

    @click.command("compare")
    def fake_compare():
        click.echo("the plugin's compare ran")

    @click.command("hello")
    def hello_a():
        click.echo("hello from a")

    @click.command("hello")
    def hello_b():
        click.echo("hello from b")

    cli, _ = _cli_with(
        monkeypatch, ("shadow", _commands_plugin(fake_compare)), ("a", _commands_plugin(hello_a)),
        ("b", _commands_plugin(hello_b)),
    )  # fmt: skip
    result = CliRunner().invoke(cli, ["compare", "--help"])
    assert "msprobe: warning: plugin 'shadow' adds a command 'compare', which the built-in 'compare' hides" in (
        result.stderr
    )
    assert "Compare two dumps" in result.stdout or "Usage: cli compare" in result.stdout  # the built-in's help
    assert "each add a command 'hello'" in result.stderr  # said on the first command, whichever it is
    again = CliRunner().invoke(cli, ["hello"])
    assert again.stdout.strip() in ("hello from a", "hello from b")
    assert again.stderr == ""  # once per run, not once per resolution


def test_a_plugin_command_that_raises_is_blamed_on_the_plugin(monkeypatch):
    import click
    from click.testing import CliRunner

    @click.command("explode")
    def explode():
        raise RuntimeError("kaboom")

    cli, _ = _cli_with(monkeypatch, ("fireworks", _commands_plugin(explode)))
    result = CliRunner().invoke(cli, ["explode"])
    assert result.exit_code == 3  # an internal error, the plugin's
    assert "plugin 'fireworks' failed: RuntimeError: kaboom" in result.output and "internal error" not in result.output


# -- hooks go through pluggy: ordering, wrappers, first result -------------------------------------------


def _metric_plugin(name, **opts):
    class Plugin:
        @hookimpl(**opts)
        def msprobe_compare_metrics(self):
            return [CompareMetric(name, lambda a, b: 0.0)]

    return Plugin()


def _names(registry):
    return [m.name for m in registry.compare_metrics()]


def test_tryfirst_and_trylast_order_the_answers_as_pluggy_documents():
    # pluggy calls the newest registration first; tryfirst/trylast override that order
    registry = PluginRegistry(
        load_entry_points=False,
        default_plugins=(),
        extra_plugins=[("early", _metric_plugin("Early", tryfirst=True)), ("plain", _metric_plugin("Plain")),
                       ("late", _metric_plugin("Late", trylast=True))],
    )  # fmt: skip
    assert _names(registry) == ["Early", "Plain", "Late"]


def test_a_wrapper_sees_and_changes_the_other_plugins_answers():
    class Renamer:
        @hookimpl(wrapper=True)
        def msprobe_compare_metrics(self):
            answers = yield
            return [[CompareMetric(m.name.upper(), m.function) for m in answer] for answer in answers]

    registry = PluginRegistry(
        load_entry_points=False, default_plugins=(),
        extra_plugins=[("metrics", _metric_plugin("ones")), ("renamer", Renamer())],
    )  # fmt: skip
    assert _names(registry) == ["ONES"]


def test_a_wrapper_that_raises_is_reported_and_the_answers_survive():
    class Broken:
        @hookimpl(wrapper=True)
        def msprobe_compare_metrics(self):
            raise RuntimeError("before yield")
            yield  # pragma: no cover

    class BrokenAfter:
        @hookimpl(wrapper=True)
        def msprobe_compare_metrics(self):
            yield
            raise RuntimeError("after yield")

    registry = PluginRegistry(
        load_entry_points=False, default_plugins=(),
        extra_plugins=[("metrics", _metric_plugin("Ones")), ("broken", Broken()), ("after", BrokenAfter())],
    )  # fmt: skip
    assert _names(registry) == ["Ones"]
    assert any("before yield" in e for e in registry.infos["broken"].errors)
    assert any("after yield" in e for e in registry.infos["after"].errors)


def test_first_result_hooks_stop_at_the_first_answer_and_skip_a_failing_plugin():
    class Hooks:
        def install(self):
            pass

        def remove(self):
            pass

    answered = Hooks()

    class Raises:
        @hookimpl(tryfirst=True)
        def msprobe_task_hooks(self, session):
            raise RuntimeError("cannot")

    class WrongKind:
        @hookimpl
        def msprobe_task_hooks(self, session):
            return "hooks"  # no install()/remove()

    class Answers:
        @hookimpl(trylast=True)
        def msprobe_task_hooks(self, session):
            return answered

    registry = PluginRegistry(
        load_entry_points=False, default_plugins=(),
        extra_plugins=[("answers", Answers()), ("wrong", WrongKind()), ("raises", Raises())],
    )  # fmt: skip
    assert registry.call_first("msprobe_task_hooks", session=None) is answered
    assert "cannot" in registry.failures("msprobe_task_hooks")[0]
    assert any("not an object with install() and remove()" in e for e in registry.infos["wrong"].errors)


def test_trace_logs_each_hook_call_with_plugin_arguments_and_time(monkeypatch, capsys):
    import json

    from msprobe.core import plugins

    monkeypatch.setenv("MSPROBE_TRACE_PLUGINS", "1")
    monkeypatch.setattr(plugins.trace_logger, "handlers", [])
    registry = PluginRegistry(load_entry_points=False, default_plugins=(), extra_plugins=[("m", _metric_plugin("X"))])
    registry.compare_metrics()
    lines = [line for line in capsys.readouterr().err.splitlines() if line.startswith("msprobe trace: ")]
    records = [json.loads(line[len("msprobe trace: ") :]) for line in lines]
    calls = [r for r in records if r["hook"] == "msprobe_compare_metrics"]
    assert calls and calls[0]["plugin"] == "m" and calls[0]["ms"] >= 0 and "X" in calls[0]["result"]


def test_two_metrics_for_one_column_keep_the_first_and_report_the_second():
    registry = PluginRegistry(load_entry_points=False, extra_plugins=[("dup", _metric_plugin("Cosine"))])
    assert _names(registry).count("Cosine") == 1
    assert any("tensor-mode column that exists already" in e for e in registry.infos["dup"].errors)


def test_built_in_features_are_plugins_listed_as_built_in():
    registry = PluginRegistry(load_entry_points=False)
    infos = {info.name: info for info in registry.plugin_infos()}
    assert infos["builtin-metrics"].builtin and "Cosine" in infos["builtin-metrics"].metrics
    assert "L2norm diff" in infos["builtin-metrics"].metrics
    assert infos["builtin-tasks"].tasks == [
        "statistics", "tensor", "structure", "overflow_check", "nan_check", "flight_recorder", "free_benchmark",
        "run_ut",
        "grad_probe",
    ]  # fmt: skip


def test_the_cli_declares_its_commands_through_its_entry_point_as_a_built_in():
    """The core names no module of the CLI: msprobe-cli's entry point brings its commands, built-in."""
    assert not any(module.startswith("msprobe.cli") for _, module in plugins.DEFAULT_PLUGINS)
    for load_entry_points in (True, False):  # without third parties' entry points, msprobe's own still load
        infos = {info.name: info for info in PluginRegistry(load_entry_points=load_entry_points).plugin_infos()}
        commands = infos["builtin-commands"]
        assert commands.builtin and commands.distribution == "msprobe-cli" and "compare" in commands.commands


def test_the_cli_commands_cannot_be_switched_off(monkeypatch):
    monkeypatch.setenv("MSPROBE_DISABLE_PLUGINS", "builtin-commands")
    infos = {info.name: info for info in PluginRegistry().plugin_infos()}
    assert not infos["builtin-commands"].disabled and "compare" in infos["builtin-commands"].commands


def test_verbose_logs_discovery(monkeypatch):
    from click.testing import CliRunner

    from msprobe.cli.main import cli
    from msprobe.core import plugins

    plugins.reset_registry()
    try:
        result = CliRunner().invoke(cli, ["--verbose", "plugins"])
    finally:
        plugins.reset_registry()
        import logging

        logging.getLogger("msprobe").setLevel(logging.WARNING)
    assert "msprobe: plugin 'builtin-metrics' (built-in) registered: msprobe_compare_metrics" in result.stderr


# -- tasks from plugins --------------------------------------------------------------------------------


def test_a_plugin_task_is_accepted_by_the_config_with_its_own_section(monkeypatch, tmp_path):
    import json

    from pydantic import BaseModel

    from msprobe.core import plugins
    from msprobe.core.backend import Task
    from msprobe.core.config import load_config
    from msprobe.core.errors import ConfigError

    class HeatmapSection(BaseModel):
        bins: int = 10

    class HeatmapPlugin:
        @hookimpl
        def msprobe_tasks(self):
            return [Task("heatmap", "activation heat maps", section=HeatmapSection)]

    registry = PluginRegistry(load_entry_points=False, extra_plugins=[("heatmap", HeatmapPlugin())])
    monkeypatch.setattr(plugins, "_registry", registry)
    config_file = tmp_path / "config.json"
    config_file.write_text(json.dumps({"task": "heatmap", "dump_path": "out", "heatmap": {"bins": 32}}))
    config = load_config(config_file)
    assert config.task == "heatmap" and config.section.bins == 32

    config_file.write_text(json.dumps({"task": "heatmap", "dump_path": "out", "heatmap": {"bins": "many"}}))
    with pytest.raises(ConfigError, match=r"config.json: heatmap.bins: Input should be a valid integer"):
        load_config(config_file)

    config_file.write_text(json.dumps({"task": "heatmaps", "dump_path": "out"}))
    with pytest.raises(ConfigError, match=r"task: unknown task 'heatmaps' \(known: statistics, .*heatmap\)"):
        load_config(config_file)


def test_msprobe_config_validate_knows_the_plugin_tasks(monkeypatch, tmp_path):
    import json

    from click.testing import CliRunner

    from msprobe.cli.main import cli
    from msprobe.core import plugins
    from msprobe.core.backend import Task

    class Plugin:
        @hookimpl
        def msprobe_tasks(self):
            return [Task("heatmap")]

    config_file = tmp_path / "config.json"
    config_file.write_text(json.dumps({"task": "heatmap", "dump_path": "out"}))
    before = CliRunner().invoke(cli, ["config", "validate", str(config_file)])
    assert before.exit_code == 2 and "unknown task 'heatmap'" in before.stderr
    monkeypatch.setattr(plugins, "_registry", PluginRegistry(load_entry_points=False, extra_plugins=[("p", Plugin())]))
    after = CliRunner().invoke(cli, ["config", "validate", str(config_file)])
    assert after.exit_code == 0 and "(task heatmap," in after.stdout


def test_a_task_naming_no_task_hook_is_that_plugins_error():
    from msprobe.core.backend import Task

    class Plugin:
        @hookimpl
        def msprobe_tasks(self):
            return [Task("odd", hook="msprobe_compare_metrics"), Task("statistics")]

    registry = PluginRegistry(load_entry_points=False, extra_plugins=[("odd", Plugin())])
    tasks = registry.tasks()
    assert "odd" not in tasks and tasks["statistics"].hook == "msprobe_dump_hooks"  # the built-in keeps its name
    errors = registry.infos["odd"].errors
    assert any("returns no task hooks" in e for e in errors) and any("'statistics' exists already" in e for e in errors)


# -- statistics-mode metrics ------------------------------------------------------------------------------


def test_metrics_serve_the_modes_they_declare(tmp_path):
    import json

    from msprobe.core.backend import Statistics
    from msprobe.core.compare.pipeline import compare_dumps
    from msprobe.core.dump.reader import read_dump

    def write(folder, maximum):
        folder.mkdir()
        entry = {"type": "torch.Tensor", "dtype": "torch.float32", "shape": [2], "Max": maximum, "Min": 0.0,
                 "Mean": 1.0, "Norm": 2.0, "requires_grad": False}  # fmt: skip
        data = {"Torch.abs.0.forward": {"input_args": [entry], "input_kwargs": {}, "output": [entry]}}
        (folder / "dump.json").write_text(json.dumps({"task": "statistics", "level": "L1", "data": data}))
        return read_dump(folder)

    def max_ratio(npu, bench):
        assert isinstance(npu, Statistics)
        return npu.max / bench.max

    ratio = CompareMetric("MaxRatio", max_ratio, modes=("statistics",))
    tensor_only = CompareMetric("TensorOnly", lambda a, b: 1.0)
    result = compare_dumps(write(tmp_path / "a", 3.0), write(tmp_path / "b", 2.0), extra_metrics=(ratio, tensor_only))
    assert result.mode == "statistics"
    assert list(result.table["MaxRatio"]) == [1.5, 1.5]  # 3.0 / 2.0, by hand
    assert "TensorOnly" not in result.table.columns
    assert list(result.table.columns[-1:]) == ["MaxRatio"]  # after the reference's columns
    assert list(result.table["Max diff"]) == [1.0, 1.0]


def test_a_metric_with_an_unknown_mode_is_refused_when_made():
    with pytest.raises(ValueError, match="modes must be a tuple of tensor, statistics"):
        CompareMetric("Bad", lambda a, b: 0.0, modes="statistics")


def test_a_broken_metric_plugin_leaves_the_good_plugins_columns_in_the_compare(monkeypatch, tmp_path, caplog):
    import json

    from msprobe.core import plugins
    from msprobe.core.compare.run import compare_pair

    def failing(actual, expected):
        raise ZeroDivisionError("no")

    class Failing:
        @hookimpl
        def msprobe_compare_metrics(self):
            return [CompareMetric("Fails", failing, modes=("statistics",))]

    class Good:
        @hookimpl
        def msprobe_compare_metrics(self):
            return [CompareMetric("Twice", lambda npu, bench: 2 * npu.max, modes=("statistics",))]

    registry = PluginRegistry(
        load_entry_points=False,
        extra_plugins=[("good", Good()), ("single", NotAList()), ("fails", Failing()), ("bad", RaisingPlugin())],
    )
    monkeypatch.setattr(plugins, "_registry", registry)
    entry = {"type": "torch.Tensor", "dtype": "torch.float32", "shape": [1], "Max": 3.0, "Min": 3.0, "Mean": 3.0,
             "Norm": 3.0}  # fmt: skip
    dump = tmp_path / "dump.json"
    data = {"Torch.abs.0.forward": {"input_args": [entry], "input_kwargs": {}, "output": [entry]}}
    dump.write_text(json.dumps({"task": "statistics", "level": "L1", "data": data}))
    _summary, result = compare_pair(dump, dump, tmp_path / "out")
    assert list(result.table["Twice"]) == [6.0, 6.0]
    assert list(result.table["Fails"]) == ["N/A", "N/A"]
    assert (
        caplog.text.count("compare metric Fails of plugin 'fails' failed (first on Torch.abs.0.forward.input.0)") == 1
    )


def test_discovery_warnings_print_once_with_one_prefix(monkeypatch):
    from click.testing import CliRunner

    from msprobe.cli.main import cli
    from msprobe.core import plugins

    fake_entry_points(monkeypatch, ("broken", "no_such_module_for_msprobe_tests"))
    plugins.reset_registry()
    try:
        result = CliRunner().invoke(cli, ["config", "--help"])
    finally:
        plugins.reset_registry()
    lines = [line for line in result.stderr.splitlines() if "broken" in line]
    expected = "msprobe: warning: plugin 'broken' failed to load and is skipped: No module named 'no_such_module_"
    assert len(lines) == 1 and lines[0].startswith(expected)


def test_the_wrapper_example_of_the_plugins_page_does_what_it_says(monkeypatch):
    """docs/plugins.md: its wrapper leaves out the example plugin's MeanShift; what stays keeps its plugin."""
    import importlib
    import re
    import textwrap

    from repo_paths import REPO_ROOT

    page = (REPO_ROOT / "docs" / "plugins.md").read_text()
    [snippet] = re.findall(r"```python\n( *@hookimpl\(wrapper=True\)\n.*?) *```", page, flags=re.S)
    namespace = {"hookimpl": hookimpl}
    exec(textwrap.dedent(snippet), namespace)  # the page's own code
    wrapper = type("Wrapper", (), {"msprobe_compare_metrics": staticmethod(namespace["msprobe_compare_metrics"])})
    monkeypatch.syspath_prepend(str(REPO_ROOT / "examples" / "msprobe-example-plugin" / "src"))
    example = importlib.import_module("msprobe_example_plugin")
    registry = PluginRegistry(load_entry_points=False, extra_plugins=[("example", example), ("wrapper", wrapper())])
    names = _names(registry)
    assert "MeanShift" not in names and "SignFlipRatio" in names and "Cosine" in names
    assert all(registry.origin(metric) != "?" for metric in registry.compare_metrics())
    assert "?" not in registry.infos


def test_trace_shows_what_a_hook_raised_and_the_wrappers(monkeypatch, capsys):
    import json

    from msprobe.core import plugins
    from msprobe.core.hookspecs import hookimpl

    class Broken:
        @hookimpl
        def msprobe_compare_metrics(self):
            raise ValueError("no metrics today")

    class Wrapping:
        @hookimpl(wrapper=True)
        def msprobe_compare_metrics(self):
            answers = yield
            return answers[:1]

    monkeypatch.setenv("MSPROBE_TRACE_PLUGINS", "1")
    monkeypatch.setattr(plugins.trace_logger, "handlers", [])
    registry = PluginRegistry(
        load_entry_points=False, default_plugins=(),
        extra_plugins=[("m", _metric_plugin("X")), ("broken", Broken()), ("wrap", Wrapping())],
    )  # fmt: skip
    registry.compare_metrics()
    lines = [line for line in capsys.readouterr().err.splitlines() if line.startswith("msprobe trace: ")]
    calls = {r["plugin"]: r for r in map(json.loads, (x[len("msprobe trace: ") :] for x in lines))}
    assert calls["broken"]["errors"] == ["ValueError: no metrics today"] and calls["broken"]["result"] == "None"
    assert "errors" not in calls["m"] and "wrapper" not in calls["m"]
    assert calls["wrap"]["wrapper"] is True and calls["wrap"]["ms"] >= calls["m"]["ms"]
    assert "X" in calls["wrap"]["result"] and "errors" not in calls["wrap"]
