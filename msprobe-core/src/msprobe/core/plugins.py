"""Plugin discovery and fault-tolerant hook calls.

Plugins come from the core's default plugins (:data:`DEFAULT_PLUGINS`) plus
the entry-point group ``msprobe.plugins``, where msprobe-cli declares its own
commands (built-in, as :data:`OWN_DISTRIBUTIONS` says). Hooks are called through pluggy,
so ``tryfirst``, ``trylast``, ``wrapper=True`` and *first result* behave as
pluggy documents. Each implementation runs inside a guard: a plugin that
raises, or returns the wrong kind of result, is recorded by name and skipped,
so one broken package never takes the others down.

``MSPROBE_DISABLE_PLUGINS=name,...`` switches plugins off;
``MSPROBE_TRACE_PLUGINS=1`` logs every hook call with plugin, arguments and time.
"""

from __future__ import annotations

import importlib
import json
import logging
import os
import sys
import time
from collections.abc import Callable, Generator, Iterable
from dataclasses import dataclass, field
from importlib import metadata
from typing import Any

import pluggy

from msprobe.core import hookspecs
from msprobe.core.backend import KNOWN_BACKENDS, Backend, CompareMetric, Perturbation, Task, canonical_framework
from msprobe.core.errors import BackendError, MsprobeError

logger = logging.getLogger(__name__)
_TAKEN_OVER_SAID: set[tuple[str, ...]] = set()  # warnings a registry made afresh (tests, workers) must not repeat
trace_logger = logging.getLogger("msprobe.plugins.trace")

DISABLE_ENV = "MSPROBE_DISABLE_PLUGINS"
TRACE_ENV = "MSPROBE_TRACE_PLUGINS"

# The core's built-in plugins, registered before any entry point, as pytest's default_plugins: (name, module).
DEFAULT_PLUGINS: tuple[tuple[str, str], ...] = (
    ("builtin-tasks", "msprobe.core.tasks"),
    ("builtin-metrics", "msprobe.core.compare.builtin_metrics"),
)
# msprobe's own packages above the core, whose entry points are built-in plugins too: msprobe-cli declares its
# commands (``builtin-commands``) as any plugin does, and the core need not know its modules
OWN_DISTRIBUTIONS = frozenset({"msprobe-cli"})


@dataclass
class PluginInfo:
    """What ``msprobe plugins`` shows about one plugin."""

    name: str
    distribution: str = ""
    version: str = ""
    builtin: bool = False
    disabled: bool = False
    errors: list[str] = field(default_factory=list)
    backend: Backend | None = None
    commands: list[str] = field(default_factory=list)
    metrics: list[str] = field(default_factory=list)
    perturbations: list[str] = field(default_factory=list)
    tasks: list[str] = field(default_factory=list)

    @property
    def loaded(self) -> bool:
        return not self.disabled and not any(e.startswith("import:") for e in self.errors)


def disabled_plugin_names(environ: dict[str, str] | None = None) -> set[str]:
    raw = (environ if environ is not None else os.environ).get(DISABLE_ENV, "")
    return {part.strip().lower() for part in raw.split(",") if part.strip()}


def _is_command(item: Any) -> bool:
    return bool(getattr(item, "name", None)) and callable(getattr(item, "main", None))


def _is_task_hooks(value: Any) -> bool:
    return callable(getattr(value, "install", None)) and callable(getattr(value, "remove", None))


# What each hook must return, checked inside the guard of every implementation:
# (kind of a single result or of each list item, its name in messages, whether the result is a list).
_RESULT_RULES: dict[str, tuple[Callable[[Any], bool], str, bool]] = {
    "msprobe_register_backend": (lambda v: isinstance(v, Backend), "a Backend", False),
    "msprobe_cli_commands": (_is_command, "a click command", True),
    "msprobe_compare_metrics": (lambda v: isinstance(v, CompareMetric), "CompareMetric", True),
    "msprobe_free_benchmark_perturbations": (lambda v: isinstance(v, Perturbation), "Perturbation", True),
    "msprobe_tasks": (lambda v: isinstance(v, Task), "Task", True),
    **{name: (_is_task_hooks, "an object with install() and remove()", False) for name in hookspecs.TASK_HOOK_NAMES},
}


class PluginRegistry:
    """The plugin manager plus a record of what each plugin gave and what failed."""

    def __init__(
        self,
        load_entry_points: bool = True,
        extra_plugins: Iterable[tuple[str, Any]] = (),
        default_plugins: Iterable[tuple[str, str]] = DEFAULT_PLUGINS,
    ):
        self.manager = pluggy.PluginManager(hookspecs.PROJECT_NAME)
        self.manager.add_hookspecs(hookspecs)
        self.infos: dict[str, PluginInfo] = {}
        self._failures: dict[str, list[str]] = {}  # hook name -> "plugin: error", once each
        self._origins: dict[int, tuple[str, Any]] = {}  # id(item) -> (plugin, item) of every list item returned
        self._disabled = disabled_plugin_names()
        self._tracing = bool(os.environ.get(TRACE_ENV))
        self._traced_errors: list[str] = []  # while tracing: failures of the hook call being traced
        if self._tracing:
            _show_trace()
        for name, module_name in default_plugins:
            module = _import_optional(module_name)
            if module is not None:
                self._register(name, module, builtin=True)
        # msprobe's own packages' entry points always: they are built-in, as the core's default plugins are
        self._load_entry_points(own_only=not load_entry_points)
        for name, plugin in extra_plugins:
            self._register(name, plugin)
        self._report_unknown_hooks()
        self._collect_backends()

    # -- discovery ----------------------------------------------------------------
    def _load_entry_points(self, own_only: bool = False) -> None:
        for entry_point in metadata.entry_points(group=hookspecs.ENTRY_POINT_GROUP):
            dist = getattr(entry_point, "dist", None)
            info = PluginInfo(
                name=entry_point.name,
                distribution=dist.name if dist else "",
                version=dist.version if dist else "",
            )
            if info.name in self.infos:
                continue  # the same distribution seen twice on sys.path
            info.builtin = _normalised(info.distribution) in OWN_DISTRIBUTIONS
            if own_only and not info.builtin:
                continue
            self.infos[info.name] = info
            if info.name.lower() in self._disabled and not info.builtin:
                info.disabled = True
                logger.debug("plugin %r (%s) is disabled by %s", info.name, entry_point.value, DISABLE_ENV)
                continue
            try:
                plugin = entry_point.load()
            except Exception as exc:
                info.errors.append(f"import: {exc.__class__.__name__}: {exc}")
                logger.warning("plugin %r failed to load and is skipped: %s", info.name, exc)
                continue
            self._register(info.name, plugin, builtin=info.builtin, info=info)

    def register(self, plugin: Any, name: str) -> None:
        """Add a plugin at run time (tests, a notebook), guarded like a discovered one."""
        self._register(name, plugin)
        self._report_unknown_hooks()

    def unregister(self, name: str) -> None:
        self.manager.unregister(name=name)
        self.infos.pop(name, None)

    def _register(self, name: str, plugin: Any, builtin: bool = False, info: PluginInfo | None = None) -> None:
        if info is None:
            info = self.infos.setdefault(name, PluginInfo(name=name, builtin=builtin))
            if name.lower() in self._disabled and not builtin:
                info.disabled = True
                return
        try:
            self.manager.register(plugin, name=name)
        except Exception as exc:  # e.g. a hookimpl whose signature matches no hookspec
            info.errors.append(f"import: {exc.__class__.__name__}: {exc}")
            logger.warning("plugin %r could not be registered: %s", name, exc)
            return
        hooks = []
        for caller in self.manager.get_hookcallers(plugin) or ():
            for impl in caller.get_hookimpls():
                if impl.plugin is plugin and not hasattr(impl.function, "__msprobe_guarded__"):
                    impl.function = self._guard(impl, caller.name)
                    hooks.append(caller.name)
        origin = "built-in" if builtin else f"{info.distribution or '?'} {info.version}".strip()
        logger.debug("plugin %r (%s) registered: %s", name, origin, ", ".join(sorted(hooks)) or "no hooks")

    def _report_unknown_hooks(self) -> None:
        """What pluggy's check_pending finds (an implementation named after no hook, such as the misspelt
        ``msprobe_compare_metric``), reported by plugin instead of raised, since that hook is never called."""
        try:
            self.manager.check_pending()
            return
        except pluggy.PluginValidationError:
            pass
        for hook_name, caller in vars(self.manager.hook).items():
            if hook_name.startswith("_") or caller.has_spec():
                continue
            for impl in caller.get_hookimpls():
                if impl.optionalhook:
                    continue
                message = f"hook: '{hook_name}' is no msprobe hook (misspelt?), so it is never called"
                info = self._info(impl.plugin_name)
                if message not in info.errors:
                    info.errors.append(message)
                    logger.warning("plugin %r: %s", impl.plugin_name, message)

    # -- the guard around every implementation -----------------------------------------
    def _guard(self, impl: pluggy.HookImpl, hook_name: str) -> Callable[..., Any]:
        """``impl.function`` wrapped so that it cannot fail the hook call: an exception (other than a
        :class:`MsprobeError`, which is the user's to see) or a result of the wrong kind becomes that
        plugin's recorded failure, and pluggy goes on to the next implementation."""
        function, plugin, argnames = impl.function, impl.plugin_name, impl.argnames
        if impl.hookwrapper:  # old-style wrappers see pluggy's Result; left as pluggy runs them
            return function
        if impl.wrapper:
            return self._guard_wrapper(function, plugin, hook_name, argnames)

        def guarded(*args: Any) -> Any:
            started, seen = time.perf_counter(), len(self._traced_errors)
            try:
                value = function(*args)
            except MsprobeError:
                raise
            except Exception as exc:
                self._record_failure(plugin, hook_name, exc)
                value = None
            else:
                value = self._checked(plugin, hook_name, value)
            if self._tracing:
                _trace(hook_name, plugin, dict(zip(argnames, args)), started, value, self._traced_errors[seen:])
                del self._traced_errors[seen:]
            return value

        guarded.__msprobe_guarded__ = True  # type: ignore[attr-defined]
        return guarded

    def _guard_wrapper(
        self, function: Callable[..., Any], plugin: str, hook_name: str, argnames: tuple[str, ...]
    ) -> Callable[..., Any]:
        """A ``wrapper=True`` implementation, guarded before and after its ``yield``; an exception of the inner
        calls is still thrown into it, as pluggy does. The trace shows it once, around the calls it wraps."""

        def guarded(*args: Any) -> Generator[None, Any, Any]:
            started, seen = time.perf_counter(), len(self._traced_errors)
            value, raised = None, None
            try:
                value = yield from wrapped(*args)
            except BaseException as exc:  # the inner calls' exception, passed on by the wrapper
                raised = exc
                raise
            finally:
                if self._tracing:
                    errors = self._traced_errors[seen:]
                    if raised is not None:
                        errors.append(f"{raised.__class__.__name__}: {raised} (raised through)")
                    _trace(hook_name, plugin, dict(zip(argnames, args)), started, value, errors, wrapper=True)
                    del self._traced_errors[seen:]
            return value

        def wrapped(*args: Any) -> Generator[None, Any, Any]:
            generator = function(*args)
            try:
                next(generator)
            except MsprobeError:
                raise
            except Exception as exc:  # failed before yielding (StopIteration: never yielded)
                self._record_failure(plugin, hook_name, exc if not isinstance(exc, StopIteration) else
                                     TypeError("a wrapper must yield once"))  # fmt: skip
                return (yield)
            try:
                result = yield
            except BaseException as inner:
                try:
                    generator.throw(inner)
                except StopIteration as stop:
                    return stop.value
                raise  # pragma: no cover - a wrapper that yields twice
            try:
                generator.send(result)
            except StopIteration as stop:
                return stop.value
            except MsprobeError:
                raise
            except Exception as exc:
                self._record_failure(plugin, hook_name, exc)
                return result
            generator.close()
            self._record_failure(plugin, hook_name, TypeError("a wrapper must yield only once"))
            return result

        guarded.__msprobe_guarded__ = True  # type: ignore[attr-defined]
        return guarded

    def _checked(self, plugin: str, hook_name: str, value: Any) -> Any:
        """The value if it is of the kind the hook asks for; the wrong items of a list are dropped, each a
        failure of the plugin; list items are remembered with their plugin (``msprobe plugins``)."""
        rule = _RESULT_RULES.get(hook_name)
        if value is None or rule is None:
            return value
        is_kind, kind, listed = rule
        if not listed:
            if is_kind(value):
                self._origins[id(value)] = (plugin, value)
                return value
            self._record_failure(plugin, hook_name, TypeError(f"returned {type(value).__name__}, not {kind}"))
            return None
        if not isinstance(value, (list, tuple)):
            self._record_failure(plugin, hook_name, TypeError(f"returned {type(value).__name__}, not a list"))
            return None
        kept = []
        for item in value:
            if is_kind(item):
                self._origins[id(item)] = (plugin, item)
                kept.append(item)
            else:
                self._record_failure(plugin, hook_name, TypeError(f"an item is {type(item).__name__}, not {kind}"))
        return kept

    # -- calling hooks ------------------------------------------------------------------
    def call(self, hook_name: str, **kwargs: Any) -> Any:
        """Call a hook through pluggy: a list of the answers, or the first answer for a *first result* hook.

        A :class:`~msprobe.core.errors.MsprobeError` is the user's problem, not the plugin's: it propagates
        with its message. Anything else escaping the guards (an old-style hookwrapper) is recorded.
        """
        hook = getattr(self.manager.hook, hook_name)
        try:
            return hook(**kwargs)
        except MsprobeError:
            raise
        except Exception as exc:
            self._record_failure("a hookwrapper", hook_name, exc)
            return None if hook.spec and hook.spec.opts.get("firstresult") else []

    def call_first(self, hook_name: str, **kwargs: Any) -> Any:
        """The first answer of a *first result* hook (``None`` if nobody answered)."""
        return self.call(hook_name, **kwargs)

    def origin(self, item: Any) -> str:
        """The plugin that returned ``item``."""
        plugin, kept = self._origins.get(id(item), ("?", None))
        return plugin if kept is item else "?"

    def failures(self, hook_name: str) -> list[str]:
        """``plugin: error`` for each plugin that raised in ``hook_name`` (once each)."""
        return list(self._failures.get(hook_name, ()))

    def _info(self, plugin_name: str) -> PluginInfo:
        return self.infos.setdefault(plugin_name, PluginInfo(name=plugin_name))

    def _record_failure(self, plugin_name: str, hook_name: str, exc: Exception) -> None:
        info = self._info(plugin_name)
        error = f"{exc.__class__.__name__}: {exc}"
        if self._tracing:
            self._traced_errors.append(error)
        message = f"{hook_name}: {error}"
        if message not in info.errors:
            info.errors.append(message)
            self._failures.setdefault(hook_name, []).append(f"{plugin_name}: {error}")
            logger.warning("plugin %r failed in %s and is skipped there: %s", plugin_name, hook_name, error)

    # -- what the plugins give ---------------------------------------------------
    def _collect_backends(self) -> None:
        for backend in self.call("msprobe_register_backend"):
            self._info(self.origin(backend)).backend = backend

    def backends(self) -> dict[str, Backend]:
        return {info.backend.name: info.backend for info in self.infos.values() if info.backend is not None}

    def backend_plugin(self, backend_name: str) -> str | None:
        for name, info in self.infos.items():
            if info.backend is not None and info.backend.name == backend_name:
                return name
        return None

    def find_backend(self, name: str) -> Backend:
        """The installed backend called ``name`` (or an alias), else a message saying what to install."""
        for backend in self.backends().values():
            if backend.matches(name):
                return backend
        canonical = canonical_framework(name)
        if canonical is not None:
            package = KNOWN_BACKENDS[canonical][0]
            if any(info.disabled and info.name.lower() == canonical for info in self.infos.values()):
                raise BackendError(f"framework '{canonical}' is disabled by {DISABLE_ENV}")
            raise BackendError(f"framework '{canonical}' is not installed: pip install {package}")
        installed = ", ".join(sorted(self.backends())) or "none"
        raise BackendError(f"unknown framework '{name}' (installed backends: {installed})")

    def _listed(self, hook_name: str) -> list[tuple[str, Any]]:
        """(plugin, item) for every item of every answer of a list hook, in pluggy's call order (newest
        plugin first). The guards have checked each answer already; an item a hookwrapper added is checked
        here."""
        is_kind, kind, _listed = _RESULT_RULES[hook_name]
        found = []
        for answer in self.call(hook_name) or ():
            for item in answer if isinstance(answer, (list, tuple)) else ():
                if is_kind(item):
                    found.append((self.origin(item), item))
                else:
                    self._record_failure("a hookwrapper", hook_name, TypeError(f"an item is not {kind}"))
        return found

    def compare_metrics(self, mode: str | None = None) -> list[CompareMetric]:
        """Every metric (``mode``: those serving that compare mode), built-in ones first."""
        found = self._listed("msprobe_compare_metrics")
        found.sort(key=lambda pair: not self._info(pair[0]).builtin)
        metrics: list[CompareMetric] = []
        columns: set[tuple[str, str]] = set()  # (name, mode): a column is one metric's, the first plugin's
        for plugin_name, item in found:
            taken = [m for m in item.modes if (item.name, m) in columns]
            if taken:
                error = ValueError(f"metric '{item.name}' names a {taken[0]}-mode column that exists already")
                self._record_failure(plugin_name, "msprobe_compare_metrics", error)
                continue
            columns.update((item.name, m) for m in item.modes)
            _note(self._info(plugin_name).metrics, item.name)
            if mode is None or item.serves(mode):
                metrics.append(item)
        return metrics

    def perturbations(self, framework: str | None = None, every_framework: bool = False) -> dict[str, Perturbation]:
        """Perturbations usable on ``framework`` (those for any framework included); ``every_framework``: all of
        them, as ``msprobe plugins`` lists them."""
        found: dict[str, Perturbation] = {}
        owners: dict[str, str] = {}
        for plugin_name, item in self._listed("msprobe_free_benchmark_perturbations"):
            if every_framework or item.framework in (None, framework):
                if item.name in found and owners[item.name] != plugin_name:
                    self._taken_over("perturbation", item.name, owners[item.name], plugin_name)
                owners.setdefault(item.name, plugin_name)
                found.setdefault(item.name, item)
                _note(self._info(plugin_name).perturbations, item.name)
        return found

    def _taken_over(self, kind: str, name: str, newer: str, older: str) -> None:
        """A newer plugin's item shadows an older one's of the same name: said once per process."""
        said = (kind, name, newer, older)
        if said not in _TAKEN_OVER_SAID:
            _TAKEN_OVER_SAID.add(said)
            logger.warning("%s %r of plugin %r takes over the one plugin %r provides", kind, name, newer, older)

    def tasks(self) -> dict[str, Task]:
        """Every task name the config accepts, built-in ones first; the first plugin to name a task keeps it."""
        found = self._listed("msprobe_tasks")
        found.sort(key=lambda pair: not self._info(pair[0]).builtin)
        tasks: dict[str, Task] = {}
        for plugin_name, item in found:
            no_hook = not item.hook and self._info(plugin_name).builtin  # run_ut, grad_probe: not run by start()
            if item.hook not in hookspecs.TASK_HOOK_NAMES and not no_hook:
                error = ValueError(f"task '{item.name}' names hook '{item.hook}', which returns no task hooks")
                self._record_failure(plugin_name, "msprobe_tasks", error)
                continue
            if item.name in tasks:
                if tasks[item.name] is not item:
                    self._record_failure(plugin_name, "msprobe_tasks", ValueError(f"task '{item.name}' exists already"))
                continue
            tasks[item.name] = item
            _note(self._info(plugin_name).tasks, item.name)
        return tasks

    def cli_commands(self) -> list[tuple[str, str | None, Any]]:
        """(plugin name, framework it belongs to or None, click command) for every contributed command."""
        commands = []
        for plugin_name, command in self._listed("msprobe_cli_commands"):
            info = self._info(plugin_name)
            framework = info.backend.name if info.backend is not None else None
            commands.append((plugin_name, framework, command))
            _note(info.commands, command.name)
        return commands

    def is_builtin(self, plugin_name: str) -> bool:
        return self._info(plugin_name).builtin

    def unknown_disabled_names(self) -> list[str]:
        """Names in MSPROBE_DISABLE_PLUGINS that match no plugin (a typo disables nothing)."""
        known = {name.lower() for name, info in self.infos.items() if not info.builtin}
        return sorted(name for name in self._disabled if name not in known)

    def plugin_infos(self) -> list[PluginInfo]:
        self.compare_metrics()
        self.perturbations(every_framework=True)  # the built-in ones are framework-specific
        self.tasks()
        self.cli_commands()
        return sorted(self.infos.values(), key=lambda info: (info.builtin, info.name))


def _note(names: list[str], name: str) -> None:
    if name not in names:
        names.append(name)


def _normalised(distribution: str) -> str:
    """A distribution's name as packaging compares them (``msprobe_cli`` is ``msprobe-cli``)."""
    return distribution.lower().replace("_", "-").replace(".", "-")


def _import_optional(module_name: str) -> Any:
    """A default plugin's module, or None when its package is not installed."""
    try:
        return importlib.import_module(module_name)
    except ModuleNotFoundError as exc:
        if exc.name and module_name.startswith(exc.name):
            return None
        raise


def _show_trace() -> None:
    """MSPROBE_TRACE_PLUGINS: the trace goes to stderr whatever the logging setup, as one JSON line per call."""
    trace_logger.setLevel(logging.INFO)
    if not trace_logger.handlers:
        handler = logging.StreamHandler(sys.stderr)
        handler.setFormatter(logging.Formatter("msprobe trace: %(message)s"))
        trace_logger.addHandler(handler)
        trace_logger.propagate = False


def _trace(
    hook_name: str,
    plugin: str,
    kwargs: dict[str, Any],
    started: float,
    value: Any,
    errors: list[str],
    wrapper: bool = False,
) -> None:
    """One JSON line: a wrapper's ``ms`` includes the calls it wraps; ``errors`` are what the plugin raised or
    returned wrongly in this call (its ``result`` is then what the hook went on with)."""
    record: dict[str, Any] = {"hook": hook_name, "plugin": plugin}
    if wrapper:
        record["wrapper"] = True
    record["kwargs"] = {key: _short_repr(value) for key, value in kwargs.items()}
    record["ms"] = round((time.perf_counter() - started) * 1000, 3)
    record["result"] = _short_repr(value)
    if errors:
        record["errors"] = list(errors)
    trace_logger.info(json.dumps(record))


def _short_repr(value: Any, limit: int = 120) -> str:
    text = repr(value)
    return text if len(text) <= limit else text[: limit - 3] + "..."


_registry: PluginRegistry | None = None


def get_registry() -> PluginRegistry:
    """The process-wide registry, built on first use."""
    global _registry
    if _registry is None:
        _registry = PluginRegistry()
    return _registry


def reset_registry() -> None:
    """Forget discovered plugins (tests; after installing a plugin at run time)."""
    global _registry
    _registry = None
