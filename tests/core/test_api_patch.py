"""The core patcher: wrappers on modules and classes, and everything exactly as it was after remove()."""

from __future__ import annotations

import types

import pytest

from msprobe.core import api_patch
from msprobe.core.api_patch import ApiPatcher


class Base:
    def inherited(self, x):
        return x + 1


class Child(Base):
    def own(self, x):
        return x * 2

    def __add__(self, other):
        return "added"


def make_module() -> types.ModuleType:
    module = types.ModuleType("fake_framework")

    def relu(x):
        return max(x, 0)

    def outer(x):
        return module.relu(x) + 10  # calls another wrapped API

    module.relu, module.outer = relu, outer
    return module


def recording_patcher(module: types.ModuleType, calls: list[str]) -> ApiPatcher:
    def handler(original, key, args, kwargs):
        calls.append(key)
        patcher.state.busy = True  # a handler marks its thread busy, so nested APIs go straight through
        try:
            return original(*args, **kwargs)
        finally:
            patcher.state.busy = False

    targets = [
        (module, "relu", "Functional.relu"),
        (module, "outer", "Functional.outer"),
        (Child, "own", "Tensor.own"),
        (Child, "inherited", "Tensor.inherited"),
        (Child, "__add__", "Tensor.__add__"),
        (module, "missing", "Functional.missing"),
    ]
    patcher = ApiPatcher(handler, lambda: targets)
    return patcher


def test_calls_are_seen_once_at_the_outermost_level_and_everything_is_restored() -> None:
    module = make_module()
    before_module = dict(module.__dict__)
    before_class = dict(Child.__dict__)
    calls: list[str] = []
    patcher = recording_patcher(module, calls)

    for _ in range(2):  # the wrappers are reused on every install
        patcher.install()
        patcher.install()  # a second install changes nothing
        assert module.outer(-5) == 10
        assert Child().own(3) == 6 and Child().inherited(1) == 2 and Child() + Child() == "added"
        assert "inherited" in Child.__dict__
        patcher.remove()
        patcher.remove()
        assert dict(module.__dict__) == before_module
        assert dict(Child.__dict__) == before_class  # the inherited method is inherited again
        assert Child().inherited(1) == 2 and Child() + Child() == "added"

    assert calls == ["Functional.outer", "Tensor.own", "Tensor.inherited", "Tensor.__add__"] * 2


def test_an_attribute_replaced_by_someone_else_is_left_alone() -> None:
    module = make_module()
    calls: list[str] = []
    patcher = recording_patcher(module, calls)
    patcher.install()
    patcher.remove()

    def theirs(x):
        return 7

    module.relu = theirs
    patcher.install()
    assert module.relu(1) == 7 and calls == []
    module.outer(1)
    assert calls == ["Functional.outer"]
    patcher.remove()
    assert module.relu is theirs


def test_a_forked_child_records_nothing() -> None:
    import os

    module = make_module()
    calls: list[str] = []
    patcher = recording_patcher(module, calls)
    patcher.install()
    try:
        module.outer(1)  # the parent records
        read_end, write_end = os.pipe()
        pid = os.fork()
        if pid == 0:  # the child: report how many calls its handler saw, then leave at once
            before = len(calls)
            module.outer(1)
            Child().own(2)
            os.write(write_end, str(len(calls) - before).encode())
            os._exit(0)
        os.close(write_end)
        seen_in_child = os.read(read_end, 16).decode()
        os.waitpid(pid, 0)
        os.close(read_end)
        assert seen_in_child == "0"
        module.outer(1)  # the parent still records
        assert calls == ["Functional.outer", "Functional.outer"]
    finally:
        patcher.remove()


def test_a_patcher_created_in_a_forked_child_records() -> None:
    import os

    parent = recording_patcher(make_module(), [])
    parent.install()  # quiet in the child
    try:
        read_end, write_end = os.pipe()
        pid = os.fork()
        if pid == 0:
            module = make_module()
            calls: list[str] = []
            patcher = recording_patcher(module, calls)
            patcher.install()
            module.outer(1)
            patcher.remove()
            os.write(write_end, str(len(calls)).encode())
            os._exit(0)
        os.close(write_end)
        seen_in_child = os.read(read_end, 16).decode()
        os.waitpid(pid, 0)
        os.close(read_end)
    finally:
        parent.remove()
    assert seen_in_child == "1"


def test_a_module_attribute_served_by_a_module_getattr_is_wrapped_and_removed() -> None:
    module = make_module()

    def lazy(x):
        return x - 1

    module.__getattr__ = lambda name: lazy if name == "lazy" else (_ for _ in ()).throw(AttributeError(name))
    calls: list[str] = []

    def handler(original, key, args, kwargs):
        calls.append(key)
        return original(*args, **kwargs)

    patcher = ApiPatcher(handler, lambda: [(module, "relu", "Functional.relu"), (module, "lazy", "Functional.lazy")])
    patcher.install()
    assert module.lazy(3) == 2 and module.relu(-1) == 0
    patcher.remove()
    assert "lazy" not in module.__dict__ and module.lazy is lazy
    assert calls == ["Functional.lazy", "Functional.relu"]


def test_while_a_compiler_traces_the_handler_is_called_through_the_escape() -> None:
    """A tracing compiler (torch.compile) must meet the handler only as a function marked to run eagerly."""
    from msprobe.core.api_patch import TraceEscape

    module = make_module()
    tracing = [False]
    marked: list[object] = []
    seen: list[tuple[str, bool]] = []

    def eager(function):
        def run_outside_the_trace(*args):
            seen.append((args[1], True))
            return function(*args)

        marked.append(function)
        return run_outside_the_trace

    def handler(original, key, args, kwargs):
        seen.append((key, False))
        return original(*args, **kwargs)

    patcher = ApiPatcher(handler, lambda: [(module, "relu", "Functional.relu")], TraceEscape(lambda: tracing[0], eager))
    patcher.install()
    try:
        assert module.relu(-3) == 0
        tracing[0] = True
        assert module.relu(4) == 4
    finally:
        patcher.remove()
    assert marked == [handler]  # marked once, shared by every wrapper
    assert seen == [("Functional.relu", False), ("Functional.relu", True), ("Functional.relu", False)]


def test_paused_puts_the_originals_back_for_a_while() -> None:
    module, calls = make_module(), []
    original_relu = module.relu
    patcher = recording_patcher(module, calls)
    patcher.install()
    with patcher.paused():
        assert module.relu is original_relu and module.relu(-3) == 0
    assert module.relu is not original_relu
    module.relu(2)
    assert calls == ["Functional.relu"]  # only the call made while installed
    patcher.remove()
    with patcher.paused():  # not installed: stays so
        pass
    assert module.relu is original_relu


@pytest.mark.parametrize(("limited", "on_a_class", "warned"), [(True, True, 1), (False, True, 0), (True, False, 0)])
def test_a_class_patched_many_times_where_its_cache_versions_run_out_is_warned_of_once(
    monkeypatch, caplog, limited, on_a_class, warned
):
    """CPython 3.13 gives a class 1,000 attribute-cache versions and each install and remove spends one: the
    user is told before they run out, once a process; older Pythons have no such limit, and a module's
    namespace has no versions to spend."""
    monkeypatch.setattr(api_patch, "CLASS_VERSIONS_LIMITED", limited)
    monkeypatch.setattr(api_patch, "CLASS_INSTALLS_BEFORE_WARNING", 3)
    monkeypatch.setattr(api_patch, "_WARNED_OF_CLASS_VERSIONS", False)
    owner = type("Tensor", (), {"add": lambda self: 1}) if on_a_class else types.ModuleType("functional")
    if not on_a_class:
        owner.add = lambda: 1
    patchers = [ApiPatcher(lambda original, key, args, kwargs: original(*args, **kwargs),
                           lambda: [(owner, "add", "Tensor.add")]) for _ in range(2)]  # fmt: skip
    with caplog.at_level("WARNING", logger="msprobe.core.api_patch"):
        for _ in range(6):
            for patcher in patchers:  # two patchers, as the dump and its write watch: still one warning
                patcher.install()
                patcher.remove()
    said = [record.getMessage() for record in caplog.records if "stops caching" in record.getMessage()]
    assert len(said) == warned
    assert all("Tensor's methods were wrapped and put back 3 times" in line and '"step"' in line for line in said)
