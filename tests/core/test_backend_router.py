import pytest

from msprobe.core import backend_router
from msprobe.core.backend import Backend
from msprobe.core.errors import BackendError, UsageError
from msprobe.core.hookspecs import hookimpl
from msprobe.core.plugins import PluginRegistry
from msprobe.core.recording.session import BaseDebugger


class AlphaModel:
    pass


class BetaModel:
    pass


class RecordingDebugger(BaseDebugger):
    framework = "alpha"
    created = []

    def __init__(self, **kwargs):
        super().__init__(**kwargs)
        RecordingDebugger.created.append(kwargs)

    def is_model(self, obj):
        return isinstance(obj, AlphaModel)


class AlphaBackend(Backend):
    name = "alpha"
    aliases = ("a",)
    import_name = "json"

    def owns(self, obj):
        return isinstance(obj, AlphaModel)

    def create_debugger(self, **kwargs):
        return RecordingDebugger(**kwargs)


class BetaBackend(AlphaBackend):
    name = "beta"
    aliases = ("b",)

    def owns(self, obj):
        return isinstance(obj, BetaModel)


class BrokenBackend(AlphaBackend):
    name = "gamma"
    import_name = "no_such_framework_module"


def plugin(backend):
    class Plugin:
        @hookimpl
        def msprobe_register_backend(self):
            return backend

    return Plugin()


def registry(*backends):
    return PluginRegistry(load_entry_points=False, extra_plugins=[(b.name, plugin(b)) for b in backends])


def test_single_installed_backend_is_chosen():
    assert backend_router.select_backend(registry(AlphaBackend())).name == "alpha"


def test_unavailable_backends_do_not_count_as_the_single_one():
    assert backend_router.select_backend(registry(AlphaBackend(), BrokenBackend())).name == "alpha"
    with pytest.raises(BackendError, match="no installed backend can run.*no_such_framework_module is not installed"):
        backend_router.select_backend(registry(BrokenBackend()))


def test_config_framework_wins_and_aliases_work():
    both = registry(AlphaBackend(), BetaBackend())
    assert backend_router.select_backend(both, framework="b").name == "beta"


def test_model_picks_its_backend():
    both = registry(AlphaBackend(), BetaBackend())
    assert backend_router.select_backend(both, model=BetaModel()).name == "beta"
    with pytest.raises(BackendError, match="no installed backend owns a model of type str"):
        backend_router.select_backend(both, model="not a model")


def test_ambiguity_and_absence_are_clear_errors():
    with pytest.raises(BackendError, match="several backends are installed \\(alpha, beta\\)"):
        backend_router.select_backend(registry(AlphaBackend(), BetaBackend()))
    with pytest.raises(BackendError, match="no backend is installed: pip install msprobe-torch"):
        backend_router.select_backend(registry())
    with pytest.raises(BackendError, match="pip install msprobe-torch"):
        backend_router.select_backend(registry(AlphaBackend()), framework="pytorch")
    with pytest.raises(BackendError, match="'gamma' is installed but cannot run"):
        backend_router.select_backend(registry(BrokenBackend()), framework="gamma")


def test_precision_debugger_routes_and_forwards(monkeypatch, tmp_path):
    reg = registry(AlphaBackend(), BetaBackend())
    monkeypatch.setattr(backend_router, "get_registry", lambda: reg)
    config = tmp_path / "c.json"
    config.write_text(f'{{"dump_path": "{tmp_path}", "framework": "alpha", "level": "L0"}}')
    model = AlphaModel()
    debugger = backend_router.PrecisionDebugger(config_path=str(config), model=model)
    assert debugger.framework == "alpha"
    assert isinstance(debugger.debugger, RecordingDebugger)
    assert debugger.debugger.model is model and debugger.config.level == "L0"
    with pytest.raises(UsageError, match="stop\\(\\) was called before start\\(\\)"):
        debugger.stop()


def test_wrong_model_type_is_a_usage_error(tmp_path):
    with pytest.raises(UsageError, match="model must be a alpha model"):
        RecordingDebugger(dump_path=str(tmp_path), model=BetaModel())


def test_level_l0_needs_a_model(tmp_path):
    debugger = RecordingDebugger(dump_path=str(tmp_path), level="L0")
    with pytest.raises(UsageError, match="level L0 dumps modules, so it needs the model"):
        debugger.start()


def test_start_asks_the_task_hook_and_installs_per_selected_step(monkeypatch, tmp_path):
    events = []

    class Hooks:
        def install(self):
            events.append(("install", session.step))

        def remove(self):
            events.append(("remove", session.step))

    class DumpPlugin:
        @hookimpl
        def msprobe_dump_hooks(self, session):
            return Hooks() if session.framework == "alpha" else None

    reg = PluginRegistry(load_entry_points=False, extra_plugins=[("dump", DumpPlugin())])
    monkeypatch.setattr("msprobe.core.plugins._registry", reg)
    debugger = RecordingDebugger(dump_path=str(tmp_path), step=[1])
    session = debugger.session
    for _ in range(3):
        debugger.start()
        debugger.stop()
        debugger.step()
    assert events == [("install", 1), ("remove", 1)]
    assert session.dump_dir == tmp_path / "step3" / "rank"


def test_task_without_a_provider_says_so(monkeypatch, tmp_path):
    reg = PluginRegistry(load_entry_points=False)
    monkeypatch.setattr("msprobe.core.plugins._registry", reg)
    debugger = RecordingDebugger(dump_path=str(tmp_path), task="free_benchmark")
    with pytest.raises(BackendError, match="task 'free_benchmark' is not available for alpha"):
        debugger.start()


def test_a_task_whose_plugin_raised_names_the_plugin_and_its_error(monkeypatch, tmp_path):
    class BrokenPlugin:
        @hookimpl
        def msprobe_free_benchmark_hooks(self, session):
            raise NameError("name 'EagerWhileOn' is not defined")

    reg = PluginRegistry(load_entry_points=False, extra_plugins=[("broken", BrokenPlugin())])
    monkeypatch.setattr("msprobe.core.plugins._registry", reg)
    debugger = RecordingDebugger(dump_path=str(tmp_path), task="free_benchmark")
    with pytest.raises(BackendError) as caught:
        debugger.start()
    assert str(caught.value) == (
        "task 'free_benchmark' is not available for alpha: the plugin providing it failed "
        "(broken: NameError: name 'EagerWhileOn' is not defined)"
    )


def test_level_l2_is_refused_with_a_reason(tmp_path):
    debugger = RecordingDebugger(dump_path=str(tmp_path), level="L2")
    with pytest.raises(UsageError, match="level L2 .*kernel dump.* use level L1"):
        debugger.start()


def test_the_front_door_takes_what_the_framework_debuggers_take():
    import inspect

    door = inspect.signature(backend_router.PrecisionDebugger.__init__).parameters
    base = inspect.signature(BaseDebugger.__init__).parameters
    assert [name for name in door if name != "framework"] == list(base)
    for name, parameter in base.items():
        assert door[name].default == parameter.default, name
    methods = ("start", "stop", "step", "save", "finish", "flush", "forward_backward_dump_end", "grad_probe", "monitor")
    for method in methods:
        ours = inspect.signature(getattr(backend_router.PrecisionDebugger, method)).parameters
        theirs = inspect.signature(getattr(BaseDebugger.__dict__[method], "function", BaseDebugger.__dict__[method]))
        theirs = theirs.parameters
        assert list(ours) == list(theirs), method


def test_the_config_file_is_read_and_checked_once(monkeypatch, tmp_path):
    """The front door reads the config to learn the framework; the framework's debugger takes that very object.
    A debugger made alone, or with other arguments, still reads its own."""
    from msprobe.core import config as config_module

    reg = registry(AlphaBackend(), BetaBackend())
    monkeypatch.setattr(backend_router, "get_registry", lambda: reg)
    reads = []
    real_read = config_module.read_config_file
    monkeypatch.setattr(config_module, "read_config_file", lambda path: reads.append(path) or real_read(path))
    config = tmp_path / "c.json"
    config.write_text(f'{{"dump_path": "{tmp_path}", "framework": "alpha", "level": "L0"}}')
    debugger = backend_router.PrecisionDebugger(config_path=str(config), model=AlphaModel(), step=[0, 2])
    assert reads == [str(config)]
    assert debugger.debugger.config.step == [0, 2] and debugger.debugger.config.level == "L0"
    RecordingDebugger(config_path=str(config), model=AlphaModel())
    assert reads == [str(config)] * 2  # made alone: nothing is handed over


def test_strict_and_the_steps_loss_reach_the_framework_debugger(monkeypatch, tmp_path):
    reg = registry(AlphaBackend(), BetaBackend())
    monkeypatch.setattr(backend_router, "get_registry", lambda: reg)
    seen = []
    monkeypatch.setattr(RecordingDebugger, "_call_hooks", lambda self, method, *args: seen.append((method, args)))
    debugger = backend_router.PrecisionDebugger(dump_path=str(tmp_path), framework="alpha", strict=True, level="L1")
    assert debugger.debugger.config.strict is True and RecordingDebugger.created[-1]["strict"] is True
    debugger.step(loss=2.5)
    assert ("observe_loss", (2.5,)) in seen and debugger.debugger.current_step == 1


def test_task_run_ut_in_a_training_job_says_what_runs_it(monkeypatch, tmp_path):
    reg = registry(AlphaBackend(), BetaBackend())
    monkeypatch.setattr(backend_router, "get_registry", lambda: reg)
    monkeypatch.setattr("msprobe.core.plugins.get_registry", lambda: reg)
    debugger = backend_router.PrecisionDebugger(dump_path=str(tmp_path), framework="alpha", task="run_ut", level="L1")
    with pytest.raises(UsageError, match=r"task 'run_ut' is not run by start\(\) and stop\(\): .*msprobe run_ut"):
        debugger.start()
