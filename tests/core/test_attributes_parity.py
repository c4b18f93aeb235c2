"""The C attribute swap (``_attributes.c``) against the Python loop it stands in for (api_patch._OwnerPatches):
on the same classes, the same attributes replaced, skipped and put back, and the classes left as found."""

from __future__ import annotations

import os

import pytest

from msprobe.core import api_patch

if os.environ.get("MSPROBE_REQUIRE_EXTENSIONS") == "1":  # CI: not built is a failure, not a skip
    from msprobe.core import _attributes
else:
    _attributes = pytest.importorskip("msprobe.core._attributes", reason="msprobe-core was built without a C compiler")


def _classes():
    """A base and a subclass: an attribute the subclass holds, one it inherits, one replaced by someone else
    since, one that is gone, and a slot of a built-in type that cannot be set."""

    class Base:
        def inherited(self):
            return "base"

        def theirs(self):
            return "base theirs"

    class Child(Base):
        def owned(self):
            return "child"

        def gone(self):
            return "gone"

    return Base, Child


def _run(use_c: bool, monkeypatch) -> dict:
    monkeypatch.setattr(api_patch, "_attributes", _attributes if use_c else None)
    _base, child = _classes()
    originals = {"owned": child.owned, "inherited": child.inherited, "theirs": child.theirs, "gone": child.gone}
    patches = api_patch._OwnerPatches(child)
    for name, original in originals.items():
        patches.add(name, original, lambda self, name=name: f"wrapped {name}")
    child.theirs = lambda self: "someone else's"  # replaced after the originals were read: theirs stays
    del child.gone
    frozen = api_patch._OwnerPatches(int)  # a built-in type: setattr raises TypeError, skipped
    frozen.add("bit_length", int.bit_length, lambda self: 0)
    patches.install()
    frozen.install()
    obj = child()
    during = {name: getattr(obj, name)() for name in ("owned", "inherited", "theirs")}
    applied = sorted(patches.applied)
    frozen_applied = sorted(frozen.applied)
    patches.remove()
    frozen.remove()
    after = {name: getattr(obj, name)() for name in ("owned", "inherited", "theirs")}
    return {
        "applied": applied,
        "frozen": frozen_applied,
        "during": during,
        "after": after,
        "own attributes": sorted(name for name in vars(child) if not name.startswith("__")),
        "gone": hasattr(child, "gone"),
        "int untouched": (5).bit_length() == 3,
    }


def test_the_c_swap_does_what_the_python_loop_does(monkeypatch):
    in_c, in_python = _run(True, monkeypatch), _run(False, monkeypatch)
    assert in_c == in_python
    # and what both must do, by hand: wrap where the original still stands, put back what was there
    assert in_c["applied"] == ["inherited", "owned"] and in_c["frozen"] == []
    assert in_c["during"] == {"owned": "wrapped owned", "inherited": "wrapped inherited", "theirs": "someone else's"}
    assert in_c["after"] == {"owned": "child", "inherited": "base", "theirs": "someone else's"}
    assert in_c["own attributes"] == ["owned", "theirs"]  # the inherited one deleted again, not left as a copy
    assert in_c["gone"] is False and in_c["int untouched"] is True


def test_the_c_swap_refuses_what_is_not_a_dict():
    with pytest.raises(TypeError):
        _attributes.install(object, [], {})
    with pytest.raises(TypeError):
        _attributes.remove(object, {}, [])
