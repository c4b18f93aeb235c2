"""docs/tutorial.md works as written: its script, then `msprobe compare`, find the changed operator."""

import re
import subprocess
import sys

from repo_paths import REPO_ROOT

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


def test_the_quickest_way_in_works_as_written(tmp_path):
    """Section 2's two commands, run as shown (comments dropped) on a script with no msprobe in it."""
    import os

    section = DOC.read_text().split("## 2.", 1)[1].split("## 3.", 1)[0]
    block = re.search(r"```bash\n(.*?)```", section, re.S).group(1)
    commands = [line.split("#", 1)[0].strip() for line in block.splitlines() if line.strip()]
    assert [c.split()[:2] for c in commands] == [["msprobe", "config"], ["msprobe", "run"]]
    (tmp_path / "train.py").write_text(
        "import torch\nmodel = torch.nn.Linear(3, 1)\noptimizer = torch.optim.SGD(model.parameters(), lr=0.1)\n"
        "for _ in range(2):\n    model(torch.randn(4, 3)).sum().backward()\n    optimizer.step()\n"
    )
    env = {**os.environ, "PATH": f"{os.path.dirname(sys.executable)}{os.pathsep}{os.environ['PATH']}"}
    for command in commands:
        done = subprocess.run(command, shell=True, cwd=tmp_path, env=env, capture_output=True, text=True)
        assert done.returncode == 0, done.stderr
    assert sorted(p.parent.parent.name for p in tmp_path.glob("dump_path/step*/rank/dump.json")) == ["step0", "step1"]
    assert "the dump is in ./dump_path: 2 steps" in done.stderr
