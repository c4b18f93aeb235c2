"""The plugin tutorial's three plugins, installed into a fresh environment as its reader would, and used."""

import json
import os
import subprocess
import venv

import pytest
from repo_paths import REPO_ROOT

TUTORIAL = REPO_ROOT / "examples" / "plugin-tutorial"
TORCH = os.environ.get("MSPROBE_TORCH_REQUIREMENT", "torch==2.13.0")  # the CPU wheel; nox passes its pin


@pytest.fixture(scope="module")
def tutorial_venv(tmp_path_factory):
    root = tmp_path_factory.mktemp("tutorial")
    venv.create(root / "venv", with_pip=True)
    bin_dir = root / "venv" / "bin"
    for packages in ([TORCH], ["./msprobe-core", "./msprobe-cli", "./msprobe-torch"]):
        installed = run(bin_dir, "pip", "install", "-q", *packages)
        assert installed.returncode == 0, installed.stderr[-2000:]
    plugins = [str(TUTORIAL / name) for name in ("msprobe-relerr", "msprobe-bf16-inputs", "msprobe-hello")]
    installed = run(bin_dir, "pip", "install", "-q", *plugins)
    assert installed.returncode == 0, installed.stderr[-2000:]
    return bin_dir, root


def run(bin_dir, *args):
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV", "MSPROBE_DISABLE_PLUGINS")}
    return subprocess.run([str(bin_dir / args[0]), *args[1:]], capture_output=True, text=True, env=env, cwd=REPO_ROOT)


def test_msprobe_plugins_lists_what_each_tutorial_plugin_adds(tutorial_venv):
    bin_dir, _ = tutorial_venv
    listing = run(bin_dir, "msprobe", "plugins")
    assert listing.returncode == 0, listing.stderr
    text = listing.stdout
    assert "relerr (plugin, msprobe-relerr 0.1.0)\n    compare metrics: RelL2Err, NormRatio" in text
    assert "bf16_inputs (plugin, msprobe-bf16-inputs 0.1.0)\n    perturbations: bf16_inputs" in text
    assert "hello (plugin, msprobe-hello 0.1.0)\n    commands: hello" in text
    assert "0 with errors" in text and listing.stderr == ""


def test_the_command_runs(tutorial_venv):
    bin_dir, _ = tutorial_venv
    greeting = run(bin_dir, "msprobe", "hello", "--name", "CI")
    assert greeting.returncode == 0 and greeting.stdout.strip() == "Hello, CI! Installed backends: pytorch"


def test_the_metric_and_the_perturbation_work_in_a_real_run(tutorial_venv):
    bin_dir, root = tutorial_venv
    used = run(bin_dir, "python", str(TUTORIAL / "try_them.py"), str(root / "out"))
    assert used.returncode == 0, used.stderr[-3000:]
    summary = json.loads(used.stdout)
    # run A's first weight is run B's times 1.01, so ||a - b|| / ||b|| = 0.01 and the norms' ratio is 1.01
    weight = "Functional.linear.0.forward.input.1"
    assert float(summary["RelL2Err"][weight]) == pytest.approx(0.01, rel=1e-5)
    assert float(summary["NormRatio"][weight]) == pytest.approx(1.01, rel=1e-6)
    assert float(summary["RelL2Err"]["Functional.linear.0.forward.input.0"]) == 0.0  # the same input data
    # a sum of 64 values in [1, 2] rounded to bfloat16 (8 significant bits) moves far beyond float32's threshold
    assert summary["bf16_inputs"] and {mode for _, mode in summary["bf16_inputs"]} == {"bf16_inputs"}


def test_msprobe_run_works_from_an_installed_wheel(tutorial_venv, tmp_path):
    """The start-up module ships in msprobe-core's wheel and finds torch's backend in a plain install."""
    bin_dir, _ = tutorial_venv
    (tmp_path / "train.py").write_text(
        "import torch\nmodel = torch.nn.Linear(3, 1)\noptimizer = torch.optim.SGD(model.parameters(), lr=0.1)\n"
        "for _ in range(2):\n    model(torch.randn(4, 3)).sum().backward()\n    optimizer.step()\n"
    )
    config = tmp_path / "config.json"
    config.write_text(json.dumps({"task": "statistics", "level": "L1", "dump_path": str(tmp_path / "dump")}))
    done = run(bin_dir, "msprobe", "run", "-c", str(config), "--", str(bin_dir / "python"), str(tmp_path / "train.py"))
    assert done.returncode == 0, done.stderr[-3000:]
    assert sorted(p.parent.parent.name for p in (tmp_path / "dump").glob("step*/rank/dump.json")) == ["step0", "step1"]
