"""CHANGELOG.md keeps the Keep a Changelog form: versions in brackets with a date, then only its six kinds."""

from __future__ import annotations

import re
from pathlib import Path

CHANGELOG = Path(__file__).resolve().parents[2] / "CHANGELOG.md"
KINDS = {"Added", "Changed", "Deprecated", "Removed", "Fixed", "Security"}


def test_versions_are_dated_and_changes_sorted_by_kind():
    text = CHANGELOG.read_text(encoding="utf-8")
    versions = re.findall(r"^## (.+)$", text, flags=re.M)
    assert versions[0] == "[Unreleased]"
    for version in versions[1:]:
        assert re.fullmatch(r"\[\d+\.\d+\.\d+\] - \d{4}-\d{2}-\d{2}", version), version
    assert set(re.findall(r"^### (.+)$", text, flags=re.M)) <= KINDS
    version_file = (CHANGELOG.parent / "VERSION").read_text().strip()
    assert any(version.startswith(f"[{version_file}]") for version in versions), "VERSION has no entry"
