"""Environment switches: a number that is not one is named in a warning, and the default is used."""

import logging

import pytest

from msprobe.core.switches import number


@pytest.mark.parametrize(("text", "expected"), [("512", 512), (" 64 ", 64), ("0", 1), ("", 256)])
def test_whole_numbers_are_taken_at_least_the_least(monkeypatch, caplog, text, expected):
    monkeypatch.setenv("MSPROBE_STATS_BATCH", text)
    assert number("MSPROBE_STATS_BATCH", 256) == expected
    assert not caplog.records


@pytest.mark.parametrize("text", ["abc", "-5", "1e3", "12.5"])
def test_anything_else_is_named_in_a_warning_and_the_default_used(monkeypatch, caplog, text):
    monkeypatch.setenv("MSPROBE_STATS_BATCH", text)
    with caplog.at_level(logging.WARNING):
        assert number("MSPROBE_STATS_BATCH", 256) == 256
    assert len(caplog.records) == 1
    assert "MSPROBE_STATS_BATCH" in caplog.text and repr(text) in caplog.text


def test_a_stale_build_is_not_used_and_named_once(caplog, monkeypatch):
    import types

    from msprobe.core.switches import built_extension

    monkeypatch.delenv("MSPROBE_REQUIRE_EXTENSIONS", raising=False)  # a user's install: the Python twin runs

    current, stale, older = (types.ModuleType(name) for name in ("fresh", "msprobe.core._stale", "older"))
    current.INTERFACE_VERSION, stale.INTERFACE_VERSION = 2, 1
    with caplog.at_level(logging.WARNING):
        assert built_extension(current, 2) is current
        assert built_extension(None, 2) is None  # not built: nothing to say
        assert built_extension(stale, 2) is None
        assert built_extension(older, 2) is None  # from before the versions: none at all
    assert len(caplog.records) == 2
    assert "msprobe.core._stale is a stale build (interface 1, this code needs 2)" in caplog.records[0].getMessage()


@pytest.mark.parametrize(
    ("extension", "wrapper", "attribute"),
    [
        ("msprobe.core._attributes", "msprobe.core.api_patch", "_attributes"),
        ("msprobe.core._celltext", "msprobe.core.spreadsheet", "c_text"),
        ("msprobe.core.dump._kernels", "msprobe.core.dump.float_stats", "_kernels"),
        ("msprobe.core.dump._jsonscan", "msprobe.core.dump.block_reader", "_jsonscan"),
        ("msprobe.core.dump._frames", "msprobe.core.dump.stack", "_frames"),
        ("msprobe.core.compare._tablerows", "msprobe.core.compare.rows", "c_rows"),
        ("msprobe.core.dump._journal", "msprobe.core.dump.writer", "_c_journal"),
    ],
)
def test_each_built_extension_carries_the_version_its_wrapper_takes(extension, wrapper, attribute):
    """Built here, each extension passes its wrapper's check (a mismatch would leave the C path off unseen). In
    CI (MSPROBE_REQUIRE_EXTENSIONS=1, set by the nox sessions) one that was not built fails, rather than skips:
    _frames alone is for Python 3.11 and later."""
    import importlib
    import os
    import sys

    required = os.environ.get("MSPROBE_REQUIRE_EXTENSIONS") == "1"
    if required and not (extension.endswith("_frames") and sys.version_info < (3, 11)):
        built = importlib.import_module(extension)
    else:  # ImportError too: _frames refuses a Python before 3.11 at import
        built = pytest.importorskip(extension, reason="not built, or not for this Python", exc_type=ImportError)
    assert isinstance(built.INTERFACE_VERSION, int)
    assert getattr(importlib.import_module(wrapper), attribute) is sys.modules[extension]


def test_in_ci_an_extension_that_did_not_build_is_an_import_error(monkeypatch):
    """MSPROBE_REQUIRE_EXTENSIONS=1: not built, or stale, is an ImportError naming it; switched off is not."""
    import types

    from msprobe.core.switches import built_extension

    monkeypatch.setenv("MSPROBE_REQUIRE_EXTENSIONS", "1")
    with pytest.raises(ImportError, match="msprobe.core._never_built was not built"):
        built_extension(None, 1, "msprobe.core._never_built")
    stale = types.ModuleType("msprobe.core._old")
    stale.INTERFACE_VERSION = 1
    with pytest.raises(ImportError, match="stale build"):
        built_extension(stale, 2, "msprobe.core._old")
    assert built_extension(None, 1, "msprobe.core.dump._kernels") is None  # built, and switched off by the user
    assert built_extension(None, 1, "msprobe.core._never_built", python=(99, 0)) is None  # not for this Python
