"""Shared test helpers: paths to the repository, vendored fixtures and test data."""

from __future__ import annotations

from pathlib import Path

import pytest

REPO_ROOT = Path(__file__).resolve().parent.parent
TEST_DATA = REPO_ROOT / "tests" / "data"
REFERENCE_DUMPS = REPO_ROOT / "tests" / "fixtures" / "reference-dumps"


@pytest.fixture(autouse=True)
def _fresh_plugin_registry(monkeypatch):
    """Each test discovers plugins anew, so environment changes are seen."""
    from msprobe.core.plugins import reset_registry

    reset_registry()
    yield
    reset_registry()
