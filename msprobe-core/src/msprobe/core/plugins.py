"""Plugin discovery and fault-tolerant hook calls.

Plugins come from the entry-point group ``msprobe.plugins`` plus the core's
own built-in plugins. A plugin that fails to import, or raises inside a hook,
is recorded with its name and skipped, so one broken package never takes the
others down. ``MSPROBE_DISABLE_PLUGINS=name,...`` switches plugins off.
"""

from __future__ import annotations

import importlib
import logging
import os
from collections.abc import Iterable
from dataclasses import dataclass, field
from importlib import metadata
from typing import Any

import pluggy

from msprobe.core import hookspecs
from msprobe.core.backend import KNOWN_BACKENDS, Backend, CompareMetric, Perturbation, canonical_framework
from msprobe.core.errors import BackendError, MsprobeError

logger = logging.getLogger(__name__)

DISABLE_ENV = "MSPROBE_DISABLE_PLUGINS"
BUILTIN_PLUGINS: tuple[str, ...] = ()  # core modules registered as plugins before any entry point


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

    @property
    def loaded(self) -> bool:
        return not self.disabled and not any(e.startswith("import:") for e in self.errors)


def disabled_plugin_names(environ: dict[str, str] | None = None) -> set[str]:
    raw = (environ if environ is not None else os.environ).get(DISABLE_ENV, "")
    return {part.strip().lower() for part in raw.split(",") if part.strip()}


class PluginRegistry:
    """The plugin manager plus a record of what each plugin gave and what failed."""

    def __init__(self, load_entry_points: bool = True, extra_plugins: Iterable[tuple[str, Any]] = ()):
        self.manager = pluggy.PluginManager(hookspecs.PROJECT_NAME)
        self.manager.add_hookspecs(hookspecs)
        self.infos: dict[str, PluginInfo] = {}
        self._failures: dict[str, list[str]] = {}  # hook name -> "plugin: error", once each
        self._disabled = disabled_plugin_names()
        for module_name in BUILTIN_PLUGINS:
            self._register(module_name.rsplit(".", 1)[-1], importlib.import_module(module_name), builtin=True)
        if load_entry_points:
            self._load_entry_points()
        for name, plugin in extra_plugins:
            self._register(name, plugin)
        self._report_unknown_hooks()
        self._collect_backends()

    # -- discovery ----------------------------------------------------------------
    def _load_entry_points(self) -> None:
        for entry_point in metadata.entry_points(group=hookspecs.ENTRY_POINT_GROUP):
            dist = getattr(entry_point, "dist", None)
            info = PluginInfo(
                name=entry_point.name,
                distribution=dist.name if dist else "",
                version=dist.version if dist else "",
            )
            if info.name in self.infos:
                continue  # the same distribution seen twice on sys.path
            self.infos[info.name] = info
            if info.name.lower() in self._disabled:
                info.disabled = True
                continue
            try:
                plugin = entry_point.load()
            except Exception as exc:
                info.errors.append(f"import: {exc.__class__.__name__}: {exc}")
                logger.warning("msprobe plugin %r failed to load and is skipped: %s", info.name, exc)
                continue
            self._register(info.name, plugin, info=info)

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
            logger.warning("msprobe plugin %r could not be registered: %s", name, exc)

    def _report_unknown_hooks(self) -> None:
        """A hook implementation whose name matches no hookspec (``msprobe_compare_metric``) is never called:
        say so by plugin, as pluggy's check_pending would, instead of accepting it silently."""
        for hook_name, caller in vars(self.manager.hook).items():
            if not hook_name.startswith("msprobe_") or caller.has_spec():
                continue
            for impl in caller.get_hookimpls():
                message = f"hook: '{hook_name}' is no msprobe hook (misspelt?), so it is never called"
                info = self._info(impl.plugin_name)
                if message not in info.errors:
                    info.errors.append(message)
                    logger.warning("msprobe plugin %r: %s", impl.plugin_name, message)

    # -- calling hooks safely ---------------------------------------------------------
    def call_each(self, hook_name: str, **kwargs: Any) -> list[tuple[str, Any]]:
        """Call a hook on every plugin, newest first, skipping (and recording) failures.

        A :class:`~msprobe.core.errors.MsprobeError` is the user's problem, not the plugin's:
        it propagates with its message.
        """
        hook = getattr(self.manager.hook, hook_name)
        results = []
        for impl in reversed(hook.get_hookimpls()):
            try:
                value = impl.function(**{arg: kwargs[arg] for arg in impl.argnames})
            except MsprobeError:
                raise
            except Exception as exc:
                self._record_failure(impl.plugin_name, hook_name, exc)
                continue
            if value is not None:
                results.append((impl.plugin_name, value))
        return results

    def call_first(self, hook_name: str, **kwargs: Any) -> Any:
        for _name, value in self.call_each(hook_name, **kwargs):
            return value
        return None

    def failures(self, hook_name: str) -> list[str]:
        """``plugin: error`` for each plugin that raised in ``hook_name`` (once each)."""
        return list(self._failures.get(hook_name, ()))

    def _info(self, plugin_name: str) -> PluginInfo:
        return self.infos.setdefault(plugin_name, PluginInfo(name=plugin_name))

    def _record_failure(self, plugin_name: str, hook_name: str, exc: Exception) -> None:
        info = self._info(plugin_name)
        error = f"{exc.__class__.__name__}: {exc}"
        message = f"{hook_name}: {error}"
        if message not in info.errors:
            info.errors.append(message)
            self._failures.setdefault(hook_name, []).append(f"{plugin_name}: {error}")
            logger.warning("msprobe plugin %r raised in %s and is skipped there: %s", plugin_name, hook_name, exc)

    # -- what the plugins give ---------------------------------------------------
    def _collect_backends(self) -> None:
        for plugin_name, backend in self.call_each("msprobe_register_backend"):
            if not isinstance(backend, Backend):
                self._record_failure(
                    plugin_name,
                    "msprobe_register_backend",
                    TypeError(f"returned {type(backend).__name__}, not a Backend"),
                )
                continue
            self.infos[plugin_name].backend = backend

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
            raise BackendError(f"framework '{canonical}' is not installed: pip install {package}")
        installed = ", ".join(sorted(self.backends())) or "none"
        raise BackendError(f"unknown framework '{name}' (installed backends: {installed})")

    def _listed(self, hook_name: str, kind: type | None = None, check: Any = None) -> list[tuple[str, Any]]:
        """(plugin, item) for each item of each plugin's list. A result that is no list, or an item of the wrong
        kind, is that plugin's failure, reported by name; the other plugins' items are kept."""
        found = []
        for plugin_name, items in self.call_each(hook_name):
            if not isinstance(items, (list, tuple)):
                error = TypeError(f"returned {type(items).__name__}, not a list")
                self._record_failure(plugin_name, hook_name, error)
                continue
            for item in items:
                if (kind is not None and not isinstance(item, kind)) or (check is not None and not check(item)):
                    expected = kind.__name__ if kind is not None else "a command"
                    error = TypeError(f"an item is {type(item).__name__}, not {expected}")
                    self._record_failure(plugin_name, hook_name, error)
                    continue
                found.append((plugin_name, item))
        return found

    def compare_metrics(self) -> list[CompareMetric]:
        metrics: list[CompareMetric] = []
        for plugin_name, item in self._listed("msprobe_compare_metrics", CompareMetric):
            metrics.append(item)
            _note(self._info(plugin_name).metrics, item.name)
        return metrics

    def perturbations(self, framework: str | None = None, every_framework: bool = False) -> dict[str, Perturbation]:
        """Perturbations usable on ``framework`` (those for any framework included); ``every_framework``: all of
        them, as ``msprobe plugins`` lists them."""
        found: dict[str, Perturbation] = {}
        for plugin_name, item in self._listed("msprobe_free_benchmark_perturbations", Perturbation):
            if every_framework or item.framework in (None, framework):
                found.setdefault(item.name, item)
                _note(self._info(plugin_name).perturbations, item.name)
        return found

    def cli_commands(self) -> list[tuple[str, str | None, Any]]:
        """(plugin name, framework it belongs to or None, click command) for every contributed command."""
        commands = []
        for plugin_name, command in self._listed("msprobe_cli_commands", check=lambda c: getattr(c, "name", None)):
            info = self._info(plugin_name)
            framework = info.backend.name if info.backend is not None else None
            commands.append((plugin_name, framework, command))
            _note(info.commands, command.name)
        return commands

    def unknown_disabled_names(self) -> list[str]:
        """Names in MSPROBE_DISABLE_PLUGINS that match no plugin (a typo disables nothing)."""
        known = {name.lower() for name in self.infos}
        return sorted(name for name in self._disabled if name not in known)

    def plugin_infos(self) -> list[PluginInfo]:
        self.compare_metrics()
        self.perturbations(every_framework=True)  # the built-in ones are framework-specific
        return sorted(self.infos.values(), key=lambda info: (info.builtin, info.name))


def _note(names: list[str], name: str) -> None:
    if name not in names:
        names.append(name)


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
