"""Replacing a framework's APIs with wrappers, and putting them back.

A backend lists the ``(owner, attribute, key)`` targets; the patcher puts a
wrapper on each that passes the call to a handler unless the calling thread
is already inside a handled call, so only the outermost framework call is
seen. Wrappers are built once and reused on every ``install()``;
``remove()`` restores every original. Nothing here knows a framework.
"""

from __future__ import annotations

import contextlib
import functools
import logging
import os
import sys
import threading
import types
import weakref
from collections.abc import Callable, Iterable, Iterator
from typing import Any, NamedTuple

from msprobe.core.switches import built_extension

try:  # the class case's loops in C (the rule is _OwnerPatches' below, which runs where it was not built)
    from msprobe.core import _attributes
except ImportError:
    _attributes = None
_attributes = built_extension(_attributes, 1, "msprobe.core._attributes")

logger = logging.getLogger(__name__)

# CPython 3.13 gives a class at most 1,000 versions in its attribute cache; every install() and remove() on a
# class (torch.Tensor, each dumped step) spends one, and past them the class is looked up without the cache for the
# rest of the process. Said once, before that, with what avoids it.
# code objects whose frames run the user's own call (a patched API's wrapper, a recorder's run): an operator
# whose innermost frame outside the framework is one of these is the user's, where one issued from any other
# frame of msprobe is the tool's own work (a step guard's record leaves those out: msprobe.pytorch.rerun)
CALL_SITES: set[types.CodeType] = set()


def call_site(function: Callable) -> Callable:
    """Marks ``function`` as one that runs the user's own call (see ``CALL_SITES``)."""
    CALL_SITES.add(function.__code__)
    return function


CLASS_VERSIONS_LIMITED = sys.version_info >= (3, 13)
CLASS_INSTALLS_BEFORE_WARNING = 400
_WARNED_OF_CLASS_VERSIONS = False

# handler(original, key, args, kwargs) -> result ; key is "Prefix.api", e.g. "Functional.relu"
Handler = Callable[[Callable, str, tuple, dict], Any]
Targets = Callable[[], Iterable[tuple[Any, str, str]]]


class TraceEscape(NamedTuple):
    """How a framework's graph compiler is kept out of the handler (see ``ApiPatcher``).

    ``tracing()`` is true while the compiler traces the calling code;
    ``eager(function)`` returns ``function`` marked to run outside the trace.
    """

    tracing: Callable[[], bool]
    eager: Callable[[Callable], Callable]


class ThreadState(threading.local):
    """``busy`` while this thread is inside a handled call or inside the tool."""

    busy = False


_STATES: weakref.WeakSet[ThreadState] = weakref.WeakSet()


def _quiet_after_fork() -> None:
    """A forked child (a DataLoader worker, say) records nothing through its parent's hooks.

    Its calls are not the training's, and it would otherwise write its own
    entries into the parent's open step files, which it shares. The child
    has only the thread that forked; a debugger the child creates itself
    records as usual.
    """
    for state in list(_STATES):
        state.busy = True


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_quiet_after_fork)


class unrecorded:  # lower case: used as a function, ``with unrecorded():``
    """The framework calls made inside are the tool's own: no dump running beside them records them.

    For tools that run beside a dump rather than inside it (the grad probe
    measuring gradients while another debugger dumps): their arithmetic
    would otherwise show up among the training's entries. A class rather
    than a generator: a tensor-parallel step enters it for each of the
    framework's own calls, and a generator's context costs several times
    as much.
    """

    __slots__ = ("_states",)

    def __enter__(self) -> None:
        self._states = [(state, state.busy) for state in list(_STATES)]
        for state, _ in self._states:
            state.busy = True

    def __exit__(self, *_exception: object) -> None:
        for state, busy in self._states:
            state.busy = busy


class _OwnerPatches:
    """Every attribute replaced on one object (a module or a class), put on and taken off together.

    A training step starts and stops the dump, so ~1,000 wrappers go on and
    off per step. A module's attributes are swapped with one update of its
    namespace; a class's are looked up first and then set without a lookup
    in between, which lets Python invalidate the class's method cache once
    rather than once per attribute.
    """

    __slots__ = ("applied", "installs", "originals", "owned", "owner", "plain_module", "wrappers")

    def __init__(self, owner: Any):
        self.owner = owner
        self.plain_module = type(owner) is types.ModuleType  # no custom __setattr__: its __dict__ is the truth
        self.originals: dict[str, Any] = {}
        self.wrappers: dict[str, Any] = {}
        self.owned: set[str] = set()  # attributes the owner itself held (not inherited), restored by setattr
        self.applied: dict[str, Any] = {}  # what install() replaced: attribute -> original
        self.installs = 0  # install() calls on a class, for the 3.13 warning

    def add(self, attribute: str, original: Any, wrapper: Any) -> None:
        self.originals[attribute] = original
        self.wrappers[attribute] = wrapper
        if attribute in getattr(self.owner, "__dict__", {}):
            self.owned.add(attribute)
        elif self.plain_module:  # served by a module __getattr__: set and deleted one by one, like a class's
            self.plain_module = False

    def install(self) -> None:
        owner, originals = self.owner, self.originals
        if self.plain_module:
            namespace = owner.__dict__
            if namespace.items() >= originals.items():  # the usual case, checked in one pass in C
                namespace.update(self.wrappers)
                self.applied = originals
                return
            # someone else replaced some since: leave theirs alone
            applied = {name: original for name, original in originals.items() if namespace.get(name) is original}
            namespace.update({name: self.wrappers[name] for name in applied})
            self.applied = applied
            return
        if CLASS_VERSIONS_LIMITED and isinstance(owner, type):
            self._count_class_install()
        if _attributes is not None:
            self.applied = _attributes.install(owner, originals, self.wrappers)
            return
        present = [name for name, original in originals.items() if getattr(owner, name, None) is original]
        applied = {}
        for name in present:
            try:
                setattr(owner, name, self.wrappers[name])
            except (AttributeError, TypeError):
                continue  # read-only attribute
            applied[name] = originals[name]
        self.applied = applied

    def _count_class_install(self) -> None:
        global _WARNED_OF_CLASS_VERSIONS
        self.installs += 1
        if self.installs < CLASS_INSTALLS_BEFORE_WARNING or _WARNED_OF_CLASS_VERSIONS:
            return
        _WARNED_OF_CLASS_VERSIONS = True
        logger.warning(
            "msprobe: %s.%s's methods were wrapped and put back %d times in this process on Python %d.%d (once "
            "per dumped step); after about 500, CPython stops caching lookups on that class for the rest of the "
            'process (its method lookups about 1.3x slower). For a long dump, choose its steps with "step" in the '
            "config, or run it on Python 3.12 or older",
            self.owner.__module__,
            self.owner.__qualname__,
            self.installs,
            *sys.version_info[:2],
        )

    def remove(self) -> None:
        applied, self.applied = self.applied, {}
        if self.plain_module:
            self.owner.__dict__.update(applied)
            return
        owner, owned = self.owner, self.owned
        if _attributes is not None:
            _attributes.remove(owner, applied, owned)
            return
        for name, original in applied.items():
            if name in owned:
                setattr(owner, name, original)
                continue
            try:
                delattr(owner, name)
            except AttributeError:
                setattr(owner, name, original)


def resolve_attribute(root: Any, dotted: str) -> tuple[Any, str]:
    """(owner, attribute) of 'linalg.norm' under root; AttributeError when missing."""
    owner = root
    parts = dotted.split(".")
    for part in parts[:-1]:
        owner = getattr(owner, part)
    getattr(owner, parts[-1])
    return owner, parts[-1]


class ApiPatcher:
    """Wrappers around a framework's APIs that hand each outermost call to ``handler``.

    ``escape``: a graph compiler that traces Python (torch.compile) would
    otherwise trace the handler too, on placeholder tensors it cannot read;
    while it traces, the handler is called through ``escape.eager``, so the
    compiler breaks the graph there and the call is recorded as it runs,
    on real tensors.
    """

    def __init__(self, handler: Handler, targets: Targets, escape: TraceEscape | None = None):
        self.handler = handler
        self.targets = targets
        self.escape = escape
        self._eager_handler = escape.eager(handler) if escape is not None else None  # made once, shared
        self.state = ThreadState()
        _STATES.add(self.state)
        self._owners: list[_OwnerPatches] | None = None  # built on the first install, reused after
        self._installed = False

    def _build_plan(self) -> list[_OwnerPatches]:
        owners: dict[int, _OwnerPatches] = {}
        for owner, attribute, key in self.targets():
            original = getattr(owner, attribute, None)
            if original is None or not callable(original) or getattr(original, "__msprobe_original__", None):
                continue
            group = owners.get(id(owner))
            if group is None:
                group = owners[id(owner)] = _OwnerPatches(owner)
            if attribute not in group.originals:
                group.add(attribute, original, self._wrap(original, key))
        return list(owners.values())

    def install(self) -> None:
        if self._owners is None:
            self._owners = self._build_plan()
        if self._installed:
            return
        for group in self._owners:
            group.install()
        self._installed = True

    @property
    def active(self) -> bool:
        """Installed, with something found to wrap."""
        return self._installed and bool(self._owners)

    def remove(self) -> None:
        if not self._installed:
            return
        for group in reversed(self._owners or []):
            group.remove()
        self._installed = False

    @contextlib.contextmanager
    def paused(self) -> Iterator[None]:
        """The originals in place for a while (code that records what it finds, such as a compiler's tables)."""
        installed = self._installed
        self.remove()
        try:
            yield
        finally:
            if installed:
                self.install()

    def _wrap(self, original: Callable, key: str) -> Callable:
        state = self.state
        handler = self.handler
        if self.escape is not None:
            tracing, eager_handler = self.escape.tracing, self._eager_handler

            @functools.wraps(original)
            def wrapper(*args: Any, **kwargs: Any) -> Any:
                if state.busy:
                    return original(*args, **kwargs)
                if tracing():
                    return eager_handler(original, key, args, kwargs)
                return handler(original, key, args, kwargs)

        else:

            @functools.wraps(original)
            def wrapper(*args: Any, **kwargs: Any) -> Any:
                if state.busy:
                    return original(*args, **kwargs)
                return handler(original, key, args, kwargs)

        wrapper.__msprobe_original__ = original
        CALL_SITES.add(wrapper.__code__)
        return wrapper
