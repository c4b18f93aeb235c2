"""Debian's Chromium driven through Playwright, for the tests of the self-contained pages (graph, trend)."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest


def chromium_path() -> str:
    path = os.environ.get("MSPROBE_CHROMIUM") or shutil.which("chromium") or "/usr/bin/chromium"
    if not Path(path).exists():
        pytest.fail("Debian's chromium is needed (apt-get install chromium); the nox sessions install it")
    return path


def launch(playwright):
    return playwright.chromium.launch(executable_path=chromium_path(), args=["--no-sandbox"])


def open_page(browser, path: Path):
    """The page, loaded until its script says it is ready, and the list its script errors go to."""
    page = browser.new_page(viewport={"width": 1400, "height": 850})
    errors: list[str] = []
    page.on("pageerror", lambda error: errors.append(str(error)))
    page.goto(path.resolve().as_uri())
    page.wait_for_selector("body[data-ready='1']")
    return page, errors
