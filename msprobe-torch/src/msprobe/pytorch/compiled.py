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
Tensor methods inside compiled code then go undumped.
"""

from __future__ import annotations

import functools
import logging
from collections.abc import Callable
from typing import Any

import torch

from msprobe.core.api_patch import TraceEscape

logger = logging.getLogger(__name__)


@functools.cache
def compile_escape() -> TraceEscape | None:
    """None for a torch without ``torch.compiler`` (nothing traces Python there)."""
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
    """Compiled code runs eagerly between ``on()`` and ``off()`` (see the module's docstring)."""

    def __init__(self) -> None:
        self._stance: Any = None

    def on(self) -> None:
        set_stance = getattr(getattr(torch, "compiler", None), "set_stance", None)
        if set_stance is None or self._stance is not None:
            return
        try:
            self._stance = set_stance("force_eager")
        except RuntimeError as exc:  # started inside a compiled region: the wrappers' own escape still holds
            logger.debug("torch.compile stance left as it was: %s", exc)

    def off(self) -> None:
        stance, self._stance = self._stance, None
        if stance is not None:
            stance.__exit__(None, None, None)  # the stance before on()
