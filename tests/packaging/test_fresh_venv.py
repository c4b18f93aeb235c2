"""The packages install alone into a fresh virtual environment, as a user would install them."""

import os
import subprocess
import sys
import venv

import pytest
from repo_paths import REPO_ROOT


@pytest.fixture(scope="module")
def fresh_venv(tmp_path_factory):
    root = tmp_path_factory.mktemp("venv")
    venv.create(root, with_pip=True)
    return root / "bin"


def run(bin_dir, *args):
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV", "MSPROBE_DISABLE_PLUGINS")}
    return subprocess.run([str(bin_dir / args[0]), *args[1:]], capture_output=True, text=True, env=env, cwd=REPO_ROOT)


def test_core_and_cli_alone_then_add_torch(fresh_venv):
    install = run(fresh_venv, "pip", "install", "-q", "./msprobe-core", "./msprobe-cli")
    assert install.returncode == 0, install.stderr[-2000:]
    listing = run(fresh_venv, "msprobe", "plugins")
    assert listing.returncode == 0
    assert "No backend is installed" in listing.stdout
    assert "statistics kernels: C, one pass" in listing.stdout  # pip compiled msprobe-core's C kernels
    names = run(
        fresh_venv, "python", "-c", "import msprobe, msprobe.core; print(msprobe.__file__, len(msprobe.__path__))"
    )
    assert names.stdout.startswith("None")  # an implicit namespace package: no msprobe/__init__.py
    pages = (
        "import importlib.resources as r; print(*(r.files(p).joinpath(f).is_file() for p, f in "
        "(('msprobe.core.graph', 'assets/graph.html'), ('msprobe.core.store', 'assets/trend.html'))))"
    )
    assert run(fresh_venv, "python", "-c", pages).stdout.split() == ["True", "True"]  # the page templates ship
    no_extra = run(fresh_venv, "msprobe", "db", "query", str(REPO_ROOT), "SELECT 1")
    assert no_extra.returncode != 0 and "pip install 'msprobe-core[db]'" in no_extra.stderr

    # torch itself is already tested elsewhere; here only the plugin's arrival matters
    add = run(fresh_venv, "pip", "install", "-q", "--no-deps", "./msprobe-torch")
    assert add.returncode == 0, add.stderr[-2000:]
    listing = run(fresh_venv, "msprobe", "plugins")
    assert "pytorch (backend, msprobe-torch" in listing.stdout
    assert "torch is not installed" in listing.stdout  # appears, and says what it lacks
    assert "per-call path: C" in listing.stdout  # pip compiled msprobe-torch's C extension too
    version = run(fresh_venv, "msprobe", "--version")
    assert version.stdout.strip() == f"msprobe {(REPO_ROOT / 'VERSION').read_text().strip()}"
    wrong = run(fresh_venv, "msprobe", "-f", "mindspore", "plugins")
    assert wrong.returncode == 2 and "pip install msprobe-mindspore" in wrong.stderr


def test_no_distribution_ships_a_msprobe_init():
    assert not list(REPO_ROOT.glob("msprobe-*/src/msprobe/__init__.py"))
    assert sys.version_info >= (3, 10)
