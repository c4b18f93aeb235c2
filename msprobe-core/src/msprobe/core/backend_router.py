"""``msprobe.core.PrecisionDebugger``: one entry point for every framework.

It reads the config to learn the framework, then hands the same arguments
to that framework's own ``PrecisionDebugger``, which takes the config as it
was read (it is read and checked once), and forwards every call to it.
The backend is chosen, in order, from the config's ``framework`` field,
from the model passed in, or from the single installed backend; anything
ambiguous is an error that says what to do.
"""

from __future__ import annotations

from typing import Any

from msprobe.core.backend import Backend
from msprobe.core.config import loaded_once
from msprobe.core.errors import BackendError
from msprobe.core.plugins import PluginRegistry, get_registry


def select_backend(registry: PluginRegistry, framework: str | None = None, model: Any = None) -> Backend:
    """Pick the backend for a run; raise BackendError with a remedy when it cannot be decided."""
    if framework:
        backend = registry.find_backend(framework)
        reason = backend.unavailable_reason()
        if reason is not None:
            raise BackendError(f"backend '{backend.name}' is installed but cannot run: {reason}")
        return backend
    installed = registry.backends()
    if model is not None:
        owners = [backend for backend in installed.values() if backend.owns(model)]
        if len(owners) == 1:
            return owners[0]
        if not owners:
            names = ", ".join(sorted(installed)) or "none"
            raise BackendError(
                f"no installed backend owns a model of type {type(model).__name__} (installed backends: {names})"
            )
        names = ", ".join(sorted(b.name for b in owners))
        raise BackendError(f"several backends claim the model ({names}): set 'framework' in the config")
    if not installed:
        raise BackendError("no backend is installed: pip install msprobe-torch or pip install msprobe-mindspore")
    available = [backend for backend in installed.values() if backend.is_available()]
    if len(available) == 1:
        return available[0]
    if not available:
        reasons = "; ".join(f"{b.name}: {b.unavailable_reason()}" for b in installed.values())
        raise BackendError(f"no installed backend can run ({reasons})")
    names = ", ".join(sorted(b.name for b in available))
    raise BackendError(
        f"several backends are installed ({names}): set 'framework' in the config, "
        "pass framework=..., or pass the model"
    )


class PrecisionDebugger:
    """Framework-neutral front door; see the module docstring."""

    def __init__(
        self,
        config_path: str | None = None,
        task: str | None = None,
        dump_path: str | None = None,
        level: str | None = None,
        model: Any = None,
        step: list[Any] | None = None,
        strict: bool | None = None,
        framework: str | None = None,
    ):
        """``BaseDebugger``'s arguments (a test keeps the two alike), and ``framework`` to choose the backend."""
        overrides = {"task": task, "dump_path": dump_path, "level": level, "step": step, "strict": strict}
        with loaded_once(config_path, **overrides) as config:  # the framework's debugger takes it as it is
            self.backend = select_backend(get_registry(), framework or config.framework, model)
            self.debugger = self.backend.create_debugger(config_path=config_path, model=model, **overrides)

    @property
    def framework(self) -> str:
        return self.backend.name

    def start(self, model: Any = None, request_ids: Any = None, scheduled_tokens: Any = None) -> None:
        self.debugger.start(model=model, request_ids=request_ids, scheduled_tokens=scheduled_tokens)

    def stop(self) -> None:
        self.debugger.stop()

    def step(self, loss: Any = None) -> None:
        self.debugger.step(loss=loss)

    def finish(self) -> None:
        self.debugger.finish()

    def flush(self) -> None:
        self.debugger.flush()

    def forward_backward_dump_end(self) -> None:
        self.debugger.forward_backward_dump_end()

    def save(self, variable: Any, name: str, save_backward: bool = True) -> None:
        self.debugger.save(variable, name, save_backward=save_backward)

    def note_kv_cache(self, tensors: Any) -> None:
        self.debugger.note_kv_cache(tensors)

    def grad_probe(self, target: Any) -> None:
        self.debugger.grad_probe(target)

    def monitor(self, target: Any) -> None:
        self.debugger.monitor(target)

    def __getattr__(self, name: str) -> Any:
        return getattr(self.__dict__["debugger"], name)


def seed_all(seed: int = 1234, mode: bool = False, rm_dropout: bool = True, framework: str | None = None) -> None:
    """Seed every installed framework (or the named one) the way the reference's seed_all does."""
    registry = get_registry()
    backends = [registry.find_backend(framework)] if framework else list(registry.backends().values())
    for backend in backends:
        if backend.is_available():
            backend.seed_all(seed=seed, mode=mode, rm_dropout=rm_dropout)
