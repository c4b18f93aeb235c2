"""docs/tutorial.md works as written: its script, then `msprobe compare`, find the changed operator."""

import re
import subprocess
import sys

from paths import REPO_ROOT

DOC = REPO_ROOT / "docs" / "tutorial.md"
SCRIPT = REPO_ROOT / "examples" / "tutorial" / "first_compare.py"


def test_the_page_shows_the_script_as_it_is():
    text = DOC.read_text()
    shown = re.search(r"<!-- file: examples/tutorial/first_compare.py -->\n```python\n(.*?)```", text, re.S)
    assert shown and shown.group(1) == SCRIPT.read_text()


def test_the_tutorial_finds_the_changed_operator(tmp_path):
    made = subprocess.run([sys.executable, str(SCRIPT)], cwd=tmp_path, capture_output=True, text=True)
    assert made.returncode == 0, made.stderr
    msprobe = [sys.executable, "-m", "msprobe.cli.main"]
    compared = subprocess.run([*msprobe, "compare", "-i", "compare.json", "-o", "result"], cwd=tmp_path,
                              capture_output=True, text=True)  # fmt: skip
    assert compared.returncode == 1, compared.stderr  # SUSPICIOUS
    assert "the runs part ways at Functional.gelu.0.forward" in compared.stdout
    verdict = next(line for line in compared.stdout.splitlines() if line.startswith("SUSPICIOUS"))
    assert verdict in DOC.read_text()  # the page shows the line a reader gets
    graph = subprocess.run([*msprobe, "graph", "-i", "graph.json", "-o", "graph"], cwd=tmp_path,
                           capture_output=True, text=True)  # fmt: skip
    assert graph.returncode == 0, graph.stderr
    assert list((tmp_path / "graph").glob("*.html"))
