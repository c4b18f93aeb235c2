from importlib import metadata

import pytest

from msprobe.core import hookspecs
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
    points = [metadata.EntryPoint(name, value, hookspecs.ENTRY_POINT_GROUP) for name, value in pairs]

    def entry_points(group=None, **_kw):
        return points if group == hookspecs.ENTRY_POINT_GROUP else []

    monkeypatch.setattr(metadata, "entry_points", entry_points)


def test_every_hookspec_has_a_docstring():
    specs = [getattr(hookspecs, name) for name in dir(hookspecs) if name.startswith("msprobe_")]
    assert len(specs) >= 10
    for spec in specs:
        assert spec.__doc__ and len(spec.__doc__.strip()) > 20, spec.__name__


def test_a_plugin_that_raises_is_recorded_and_the_others_keep_working():
    registry = PluginRegistry(
        load_entry_points=False,
        extra_plugins=[("good", BackendPlugin()), ("metrics", MetricPlugin()), ("bad", RaisingPlugin())],
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
    assert "'no-such-plugin', which matches no installed plugin" in result.output


def test_a_failing_metric_warns_once_not_once_per_row(tmp_path, caplog):
    import json

    import numpy as np

    from msprobe.core.compare.engine import compare_dumps, tensor_loader
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
    assert "plugin 'shadow' adds a command 'compare', which the built-in one hides" in result.stderr
    result = CliRunner().invoke(cli, ["hello"])
    assert result.stdout.strip() in ("hello from a", "hello from b")
    assert "each add a command 'hello'" in result.stderr


def test_a_plugin_command_that_raises_is_blamed_on_the_plugin(monkeypatch):
    import click
    from click.testing import CliRunner

    @click.command("explode")
    def explode():
        raise RuntimeError("kaboom")

    cli, _ = _cli_with(monkeypatch, ("fireworks", _commands_plugin(explode)))
    result = CliRunner().invoke(cli, ["explode"])
    assert result.exit_code == 1
    assert "plugin 'fireworks' failed: RuntimeError: kaboom" in result.output and "internal error" not in result.output
