"""What a plugin hands to the core: backends, metrics, perturbations, task hooks.

These are plain classes so a plugin needs nothing but ``msprobe-core`` to
describe itself; nothing here imports a framework.
"""

from __future__ import annotations

import importlib
import importlib.util
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, NamedTuple, Protocol


class TaskHooks(Protocol):
    """Framework-side machinery of one task: installed on start, removed on stop."""

    def install(self) -> None: ...

    def remove(self) -> None: ...


class Backend:
    """A deep-learning framework as the core sees it.

    Subclasses set the class attributes and override the methods that need
    the framework. ``module_prefix`` and ``import_name`` let the core answer
    "is this framework importable" and "does it own this object" without
    importing anything the user has not imported already.
    """

    name: str = ""
    aliases: tuple[str, ...] = ()
    distribution: str = ""  # the pip package that provides this backend
    import_name: str = ""  # the framework's top-level module, e.g. "torch"
    tensor_suffix: str = ""  # suffix of tensor files in dump_tensor_data
    debugger_path: str = ""  # "module:attribute" of the framework's PrecisionDebugger
    autostart_path: str = ""  # "module:function" that ``msprobe run`` calls with the config once the framework imports
    # the summary modes its dump writes and whether it runs the live md5 diff (tensor.bench_path): a config
    # asking for more is refused when it is checked, before any training starts
    summary_modes: tuple[str, ...] = ("statistics", "md5", "xor")
    live_diff: bool = True

    def config_problem(self, config: Any) -> str | None:
        """What in a valid config this backend cannot do, as 'field: why'; None when it can do all of it."""
        if config.summary_mode not in self.summary_modes:
            own = config.task == "tensor" and config.tensor.summary_mode
            field = "tensor.summary_mode" if own else "statistics.summary_mode"
            written = ", ".join(self.summary_modes)
            return f"{field}: '{config.summary_mode}' is not written by the {self.name} backend (it writes {written})"
        if config.live_diff and not self.live_diff:
            return f"tensor.bench_path: the live md5 diff is not run by the {self.name} backend"
        return None

    # -- availability -------------------------------------------------------
    def is_available(self) -> bool:
        """Whether the framework imports in this environment."""
        return self.unavailable_reason() is None

    def unavailable_reason(self) -> str | None:
        if importlib.util.find_spec(self.import_name) is None:
            return f"{self.import_name} is not installed"
        try:
            importlib.import_module(self.import_name)
        except Exception as exc:  # a broken framework install must not break the tool
            return f"{self.import_name} fails to import: {exc.__class__.__name__}: {exc}"
        return None

    def owns(self, obj: Any) -> bool:
        """Whether ``obj`` (a model, a list of models, a tensor) belongs to this framework."""
        if isinstance(obj, (list, tuple)):
            return bool(obj) and all(self.owns(item) for item in obj)
        if self.import_name not in sys.modules:  # user never imported the framework
            return False
        return any(
            (getattr(klass, "__module__", "") or "").split(".")[0] == self.import_name for klass in type(obj).__mro__
        )

    # -- the framework's debugger -----------------------------------------------
    def create_debugger(self, **kwargs: Any) -> Any:
        """Build the framework's ``PrecisionDebugger`` with the same keyword arguments."""
        module_name, _, attribute = self.debugger_path.partition(":")
        factory = getattr(importlib.import_module(module_name), attribute)
        return factory(**kwargs)

    # -- tensor files -------------------------------------------------------------
    def load_tensor(self, path: str | Path) -> Any:
        """Read a tensor file of this framework into a numpy array."""
        raise NotImplementedError(f"{self.name} cannot read tensor files")

    def save_tensor(self, array: Any, path: str | Path) -> None:
        """Write a numpy array as this framework's tensor file."""
        raise NotImplementedError(f"{self.name} cannot write tensor files")

    def load_checkpoint(self, path: str | Path) -> dict[str, Any] | None:
        """A checkpoint in this framework's own format as numpy arrays by name; None: not a format it reads.

        ``msprobe checkpoint_compare`` asks each installed backend in turn
        (safetensors it reads itself). Read nothing that executes code.
        """
        return None

    def config_check_probe(self) -> Any:
        """What ``config_check``'s collection inside a training script needs of this framework
        (a :class:`msprobe.core.config_check.ConfigCheckProbe`)."""
        raise NotImplementedError(f"{self.name} has no config_check collection")

    def seed_all(self, seed: int = 1234, mode: bool = False, rm_dropout: bool = True) -> None:
        raise NotImplementedError(f"{self.name} has no seed_all")

    def describe(self) -> str:
        reason = self.unavailable_reason()
        return "available" if reason is None else f"unavailable ({reason})"

    def matches(self, name: str) -> bool:
        wanted = name.strip().lower()
        return wanted == self.name or wanted in self.aliases


COMPARE_MODES = ("tensor", "statistics")


class Statistics(NamedTuple):
    """One tensor's summary as a statistics-mode metric receives it.

    Each value is a number when the dump holds one, otherwise what the dump holds (``None``, a bool, text).
    """

    max: Any
    min: Any
    mean: Any
    norm: Any


@dataclass(frozen=True)
class CompareMetric:
    """One column of the compare result.

    ``function(actual, expected)`` returns the cell of one matched pair. In ``tensor`` mode it receives the two
    tensors as numpy arrays; in ``statistics`` mode two :class:`Statistics`. ``modes`` says which compare modes
    the metric serves: a compare in another mode leaves it out. ``N/A`` is shown where a side is missing or
    the function raises.
    """

    name: str
    function: Callable[[Any, Any], Any]
    description: str = ""
    modes: tuple[str, ...] = ("tensor",)

    def __post_init__(self) -> None:
        unknown = [mode for mode in self.modes if mode not in COMPARE_MODES]
        if isinstance(self.modes, str) or unknown:
            raise ValueError(f"CompareMetric {self.name!r}: modes must be a tuple of {', '.join(COMPARE_MODES)}")

    def serves(self, mode: str) -> bool:
        return mode in self.modes


@dataclass(frozen=True)
class Perturbation:
    """A free-benchmark ``pert_mode``.

    ``function(tensor)`` returns the perturbed copy of one floating-point input tensor (the framework's own
    tensor type); it is called for every such input of a checked API and must not change its argument.
    ``framework`` names the backend whose tensors it takes, or ``None`` for any. ``fix`` declares that the
    perturbed run is a better answer than the plain one (higher precision, another device), so that
    ``handler_type: "fix"`` may hand its output to the training; a perturbation that only adds noise must
    leave it ``False``.
    """

    name: str
    function: Callable[[Any], Any]
    framework: str | None = None
    description: str = ""
    fix: bool = False


@dataclass(frozen=True)
class Task:
    """A name the config's ``task`` field accepts.

    ``hook`` is the hook that supplies the task's :class:`TaskHooks` (plugin tasks use
    ``msprobe_task_hooks``). ``section`` is an optional pydantic model for a config section named after the
    task; the validated section reaches the hooks as ``session.config.section``.
    """

    name: str
    description: str = ""
    hook: str = "msprobe_task_hooks"
    section: Any = None


# The official backends, so an error can say which package to install.
KNOWN_BACKENDS = {
    "pytorch": ("msprobe-torch", ("torch", "pt")),
    "mindspore": ("msprobe-mindspore", ("ms",)),
}


def canonical_framework(name: str) -> str | None:
    """Map an alias of an official backend to its name ('pt' -> 'pytorch')."""
    wanted = name.strip().lower()
    for canonical, (_, aliases) in KNOWN_BACKENDS.items():
        if wanted == canonical or wanted in aliases:
            return canonical
    return None
