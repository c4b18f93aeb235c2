"""Install the out-of-tree example plugin, use it through the CLI and the API, uninstall it."""

import subprocess
import sys

import numpy as np
import pytest

from paths import REPO_ROOT

PLUGIN_DIR = REPO_ROOT / "examples" / "msprobe-example-plugin"


def pip(*args):
    return subprocess.run(
        [sys.executable, "-m", "pip", "--disable-pip-version-check", "-q", *args], capture_output=True, text=True
    )


def msprobe(*args):
    return subprocess.run([sys.executable, "-m", "msprobe.cli.main", *args], capture_output=True, text=True)


@pytest.fixture
def installed_plugin():
    result = pip("install", "--no-deps", "--no-build-isolation", str(PLUGIN_DIR))
    assert result.returncode == 0, result.stderr
    yield
    pip("uninstall", "-y", "msprobe-example-plugin")


def test_example_plugin_lifecycle(installed_plugin, tmp_path):
    listing = msprobe("plugins")
    assert "example (plugin, msprobe-example-plugin 1.0.0)" in listing.stdout
    assert "compare metrics: SignFlipRatio" in listing.stdout
    assert "commands: sign-flips" in listing.stdout

    np.save(tmp_path / "a.npy", np.array([1.0, -2.0, 3.0, 4.0]))
    np.save(tmp_path / "b.npy", np.array([1.0, 2.0, -3.0, 4.0]))
    used = msprobe("sign-flips", str(tmp_path / "a.npy"), str(tmp_path / "b.npy"))
    assert used.returncode == 0 and used.stdout.strip() == "SignFlipRatio: 0.500000"

    api = subprocess.run(
        [
            sys.executable,
            "-c",
            "from msprobe.core.plugins import get_registry;print([m.name for m in get_registry().compare_metrics()])",
        ],
        capture_output=True,
        text=True,
    )
    assert "SignFlipRatio" in api.stdout

    assert pip("uninstall", "-y", "msprobe-example-plugin").returncode == 0
    after = msprobe("plugins")
    assert "example" not in after.stdout and "SignFlipRatio" not in after.stdout
    gone = msprobe("sign-flips", "a", "b")
    assert gone.returncode == 2 and "No such command 'sign-flips'" in gone.stderr
