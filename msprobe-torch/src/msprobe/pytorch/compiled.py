"""The tool inside code that torch.compile compiles.

Dynamo traces Python: left alone, it would trace the tool's wrappers and
hooks on placeholder tensors that hold no values (reading one fails), guard
on the tool's counters (recompiling at every call until its limit) and
compile Tensor methods into its graphs unseen. So while the tool is on,
compiled code runs eagerly (``torch.compiler.set_stance("force_eager")``,
torch 2.6 and later): the dump is exactly that of the eager run, and the
compiled code is used again once the tool stops. Where torch has no stances,
the tool's wrappers and hooks are marked to run outside the trace instead
(``untraced``, ``compile_escape``): dynamo breaks the graph at each wrapped
function or hooked module and runs the tool's code on the real tensors;
Tensor methods inside compiled code then go undumped. Neither is set up in
a process that has not called torch.compile (loading dynamo for them would
cost over a second); a start() after the first torch.compile() sets them up.
"""

from __future__ import annotations

import contextlib
import functools
import importlib
import importlib.abc
import logging
import sys
from collections.abc import Callable, Iterator, Sequence
from typing import Any

import torch

from msprobe.core.api_patch import TraceEscape

logger = logging.getLogger(__name__)


def _compiling_possible() -> bool:
    """Compiled code exists only once torch.compile was called, which loads dynamo.

    Loading dynamo takes over a second: a process that never compiles does
    not pay it for the tool. A torch without compiler stances (before 2.6)
    needs the escape set up before anything is compiled, so there it counts
    as possible from the start.
    """
    return "torch._dynamo" in sys.modules or not hasattr(getattr(torch, "compiler", None), "set_stance")


def compile_escape() -> TraceEscape | None:
    """None for a torch without ``torch.compiler``, and before anything was compiled (nothing traces Python)."""
    return _escape() if _compiling_possible() else None


@functools.cache
def _escape() -> TraceEscape | None:
    compiler = getattr(torch, "compiler", None)
    if compiler is None or not hasattr(compiler, "is_compiling") or not hasattr(compiler, "disable"):
        return None
    return TraceEscape(compiler.is_compiling, compiler.disable)


def untraced(hook: Callable[..., Any]) -> Callable[..., Any]:
    """``hook`` as it is, and run eagerly when dynamo traces the code that calls it (a module hook, say)."""
    escape = compile_escape()
    if escape is None:
        return hook
    tracing, eager = escape.tracing, escape.eager(hook)

    @functools.wraps(hook)
    def run(*args: Any, **kwargs: Any) -> Any:
        if tracing():
            return eager(*args, **kwargs)
        return hook(*args, **kwargs)

    return run


class EagerWhileOn:
    """Compiled code runs eagerly between ``on()`` and ``off()`` (see the module's docstring).

    In a process that has not compiled anything yet, the compiler's loading
    is watched instead (whatever loads it: ``torch.compile`` under any name,
    or a library): a model compiled while the tool is on runs eagerly from
    that call on.
    """

    def __init__(self, patchers: Sequence[Any] = ()) -> None:
        self._stance: Any = None
        self._patchers = patchers  # the tool's ApiPatchers, paused while dynamo loads
        self._guard: _DynamoLoadsUnpatched | None = None

    def on(self) -> None:
        set_stance = getattr(getattr(torch, "compiler", None), "set_stance", None)
        if set_stance is None or self._stance is not None:
            return
        if not _compiling_possible():
            self._watch_compile()
            return
        try:
            self._stance = set_stance("force_eager")
        except RuntimeError as exc:  # started inside a compiled region: the wrappers' own escape still holds
            logger.debug("torch.compile stance left as it was: %s", exc)

    def off(self) -> None:
        self._unwatch_compile()
        stance, self._stance = self._stance, None
        if stance is not None:
            stance.__exit__(None, None, None)  # the stance before on()

    def _watch_compile(self) -> None:
        if self._guard is not None:
            return
        self._guard = _DynamoLoadsUnpatched(self._originals, self._compiler_loaded)
        sys.meta_path.insert(0, self._guard)

    def _compiler_loaded(self) -> None:
        """Dynamo was loaded while watching: by torch.compile (under any name, ``from torch import compile``
        too) or by a library. Compiled code runs eagerly from now on.
        """
        self._unwatch_compile()
        self.on()

    @contextlib.contextmanager
    def _originals(self) -> Iterator[None]:
        with contextlib.ExitStack() as originals:
            for patcher in self._patchers:
                originals.enter_context(patcher.paused())
            yield

    def _unwatch_compile(self) -> None:
        guard, self._guard = self._guard, None
        if guard is not None and guard in sys.meta_path:
            sys.meta_path.remove(guard)


class _DynamoLoadsUnpatched(importlib.abc.MetaPathFinder):
    """Loads ``torch._dynamo`` with the tool's wrappers taken off, whoever imports it.

    Dynamo records torch's functions when it loads; loaded while the dump's
    wrappers stand in for them (a library may import it in the middle of a
    step: transformers does), it would not know torch's own functions once
    the dump stops, and compiled code would break its graph at every call.
    """

    def __init__(self, originals: Callable[[], contextlib.AbstractContextManager], loaded: Callable[[], None]):
        self.originals = originals
        self.loaded = loaded  # called once dynamo is loaded

    def find_spec(self, fullname: str, path: Any, target: Any = None) -> Any:
        if fullname != "torch._dynamo":
            return None
        for finder in sys.meta_path:
            if finder is self or not hasattr(finder, "find_spec"):
                continue
            spec = finder.find_spec(fullname, path, target)
            if spec is not None:
                break
        else:
            return None
        if spec.loader is not None and hasattr(spec.loader, "exec_module"):
            spec.loader = _LoaderWithOriginals(spec.loader, self.originals, self.loaded)
        return spec


class _LoaderWithOriginals(importlib.abc.Loader):
    def __init__(
        self, loader: Any, originals: Callable[[], contextlib.AbstractContextManager], loaded: Callable[[], None]
    ):
        self.loader, self.originals, self.loaded = loader, originals, loaded

    def create_module(self, spec: Any) -> Any:
        return self.loader.create_module(spec)

    def exec_module(self, module: Any) -> None:
        try:
            with self.originals():
                self.loader.exec_module(module)
        finally:  # the module keeps its own loader
            module.__loader__ = self.loader
            if getattr(module, "__spec__", None) is not None:
                module.__spec__.loader = self.loader
        self.loaded()

    def __getattr__(self, name: str) -> Any:
        return getattr(self.loader, name)
