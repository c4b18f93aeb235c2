"""Install the out-of-tree example plugin, use it through the CLI and the API, uninstall it."""

import csv
import json
import os
import subprocess
import sys

import numpy as np
import pytest
from repo_paths import REPO_ROOT

PLUGIN_DIR = REPO_ROOT / "examples" / "msprobe-example-plugin"


def pip(*args):
    return subprocess.run(
        [sys.executable, "-m", "pip", "--disable-pip-version-check", "-q", *args], capture_output=True, text=True
    )


def msprobe(*args, **env):
    return subprocess.run(
        [sys.executable, "-m", "msprobe.cli.main", *args], capture_output=True, text=True, env={**os.environ, **env}
    )


def statistics_dump(folder, mean):
    folder.mkdir()
    entry = {"type": "torch.Tensor", "dtype": "torch.float32", "shape": [4], "Max": 3.0, "Min": -1.0,
             "Mean": mean, "Norm": 5.0, "requires_grad": False}  # fmt: skip
    data = {"Torch.abs.0.forward": {"input_args": [entry], "input_kwargs": {}, "output": [entry]}}
    (folder / "dump.json").write_text(json.dumps({"task": "statistics", "level": "L1", "data": data}))
    return folder / "dump.json"


@pytest.fixture
def installed_plugin():
    result = pip("install", "--no-deps", "--no-build-isolation", str(PLUGIN_DIR))
    assert result.returncode == 0, result.stderr
    yield
    pip("uninstall", "-y", "msprobe-example-plugin")


def test_example_plugin_lifecycle(installed_plugin, tmp_path):
    listing = msprobe("plugins")
    assert "example (plugin, msprobe-example-plugin 1.0.0)" in listing.stdout
    assert "compare metrics: SignFlipRatio, MeanShift" in listing.stdout
    assert "commands: sign-flips, heartbeat-summary" in listing.stdout
    assert "perturbations: scale_round_trip" in listing.stdout and "tasks: heartbeat" in listing.stdout
    assert "0 with errors" in listing.stdout and listing.stderr == ""

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

    # a statistics-mode metric, and the wrapper that hides columns
    compare_json = tmp_path / "compare.json"
    npu, bench = statistics_dump(tmp_path / "npu", 1.5), statistics_dump(tmp_path / "bench", 1.0)
    compare_json.write_text(json.dumps({"npu_path": str(npu), "bench_path": str(bench)}))
    for hide, folder in (("", "shown"), ("MeanShift", "hidden")):
        done = msprobe("compare", "-i", str(compare_json), "-o", str(tmp_path / folder), MSPROBE_HIDE_METRICS=hide)
        assert done.returncode in (0, 1) and "2 values compared in statistics mode" in done.stdout, done.stderr
        rows = list(csv.DictReader(next((tmp_path / folder).glob("compare_result_*.csv")).open()))
        if hide:
            assert "MeanShift" not in rows[0]
        else:
            assert [float(row["MeanShift"]) for row in rows] == [0.125, 0.125]  # |1.5 - 1.0| / (3 - (-1))

    # the task and its config section are known to config validation
    config = tmp_path / "heartbeat.json"
    config.write_text(json.dumps({"task": "heartbeat", "dump_path": "out", "heartbeat": {"every": 0}}))
    refused = msprobe("config", "validate", str(config))
    assert refused.returncode == 2 and "heartbeat.every: Input should be greater than 0" in refused.stderr
    config.write_text(json.dumps({"task": "heartbeat", "dump_path": "out", "heartbeat": {"every": 2}}))
    assert msprobe("config", "validate", str(config)).returncode == 0

    assert pip("uninstall", "-y", "msprobe-example-plugin").returncode == 0
    after = msprobe("plugins")
    assert "example" not in after.stdout and "SignFlipRatio" not in after.stdout
    assert "unknown task 'heartbeat'" in msprobe("config", "validate", str(config)).stderr
    gone = msprobe("sign-flips", "a", "b")
    assert gone.returncode == 2 and "No such command 'sign-flips'" in gone.stderr
