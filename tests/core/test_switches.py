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
