"""Links planted where a writer would write, and the checks that none was written through."""

from __future__ import annotations

import stat
from pathlib import Path

PRECIOUS = "a file the user cares about\n"


def plant_links(tmp_path: Path, monkeypatch) -> dict:
    """Links planted at the first temporary name each result draws, and at the result's own name, all to
    ``tmp_path/victim.txt``. Returns the results drawn for, each mapped to its planted temporary."""
    from msprobe.core import files as writer_module

    victim = tmp_path / "victim.txt"
    victim.write_text(PRECIOUS)
    victim.chmod(0o600)
    draw = writer_module.temporary_name
    results: dict = {}

    def planting(path):
        name = draw(path)
        if path in results:
            return name
        name.symlink_to(victim)
        if not path.exists() and not path.is_symlink():
            path.symlink_to(victim)
        results[path] = name
        return name

    monkeypatch.setattr(writer_module, "temporary_name", planting)
    return results


def regular_results(tmp_path: Path, results: dict, suffixes: set[str]) -> set[Path]:
    """The results made, each a regular 0o640 file, ``suffixes`` all among them; the victim untouched."""
    victim = tmp_path / "victim.txt"
    assert victim.read_text() == PRECIOUS
    assert stat.S_IMODE(victim.stat().st_mode) == 0o600
    written = {path for path in results if not path.is_symlink()}
    assert written, "no writer drew a temporary name"
    for path in written:
        assert path.is_file(), path
        assert stat.S_IMODE(path.lstat().st_mode) == 0o640, path
    assert suffixes <= {path.suffix for path in written}
    return written
