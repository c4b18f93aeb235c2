"""Fixtures every test folder shares."""

from __future__ import annotations

import pytest


@pytest.fixture(autouse=True)
def _fresh_plugin_registry(monkeypatch):
    """Each test discovers plugins anew, so environment changes are seen."""
    from msprobe.core.plugins import reset_registry

    reset_registry()
    yield
    reset_registry()
