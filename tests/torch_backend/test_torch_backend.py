import subprocess
import sys

import numpy as np
import pytest
import torch
import torch.nn.functional as F

import msprobe.pytorch as mp
from msprobe import core
from msprobe.core.errors import DataFileError, UsageError
from msprobe.core.plugins import get_registry


def test_plugin_is_discovered_through_its_entry_point():
    registry = get_registry()
    backend = registry.find_backend("pt")
    assert backend.name == "pytorch" and backend.is_available()
    assert registry.infos["pytorch"].distribution == "msprobe-torch"
    assert backend.owns(torch.nn.Linear(2, 2)) and backend.owns([torch.nn.ReLU(), torch.nn.Linear(1, 1)])
    assert not backend.owns(np.zeros(2))


def test_msprobe_plugins_shows_pytorch_available():
    out = subprocess.run([sys.executable, "-m", "msprobe.cli.main", "plugins"], capture_output=True, text=True)
    assert out.returncode == 0
    assert "pytorch (backend, msprobe-torch" in out.stdout and "available" in out.stdout


def test_front_door_routes_a_torch_model(tmp_path):
    debugger = core.PrecisionDebugger(dump_path=str(tmp_path), level="L0", model=torch.nn.Linear(2, 2))
    assert debugger.framework == "pytorch"
    assert isinstance(debugger.debugger, mp.PrecisionDebugger)


def test_reference_import_path_and_bad_calls(tmp_path):
    with pytest.raises(UsageError, match="model must be a pytorch model"):
        mp.PrecisionDebugger(dump_path=str(tmp_path), model="resnet")
    debugger = mp.PrecisionDebugger(dump_path=str(tmp_path), level="L0")
    with pytest.raises(UsageError, match="stop\\(\\) was called before start\\(\\)"):
        debugger.stop()
    with pytest.raises(UsageError, match="needs the model"):
        debugger.start()


def test_pt_files_round_trip_and_bad_files(tmp_path):
    backend = get_registry().find_backend("pytorch")
    tensor = torch.arange(6, dtype=torch.bfloat16).reshape(2, 3)
    torch.save(tensor, tmp_path / "a.pt")
    array = backend.load_tensor(tmp_path / "a.pt")
    assert array.dtype == np.float32 and np.array_equal(array, np.arange(6, dtype=np.float32).reshape(2, 3))
    backend.save_tensor(np.ones(3), tmp_path / "b.pt")
    assert torch.equal(torch.load(tmp_path / "b.pt", weights_only=True), torch.ones(3, dtype=torch.float64))
    (tmp_path / "bad.pt").write_bytes(b"not a tensor file")
    with pytest.raises(DataFileError, match="bad.pt: not a readable tensor file"):
        backend.load_tensor(tmp_path / "bad.pt")
    torch.save({"x": 1}, tmp_path / "dict.pt")
    with pytest.raises(DataFileError, match="holds a dict"):
        backend.load_tensor(tmp_path / "dict.pt")


def test_seed_all_makes_runs_repeat_and_removes_dropout():
    mp.seed_all(7)
    first = torch.randn(5)
    mp.seed_all(7)
    assert torch.equal(first, torch.randn(5))
    x = torch.ones(1000)
    assert torch.equal(F.dropout(x, 0.5, training=True), x)
    assert torch.equal(torch.nn.Dropout(0.9).train()(x), x)
    with pytest.raises(UsageError):
        mp.seed_all(-1)


def test_core_seed_all_reaches_the_backend():
    core.seed_all(11, framework="torch")
    a = torch.rand(3)
    core.seed_all(11, framework="torch")
    assert torch.equal(a, torch.rand(3))


def test_every_seed_all_is_shown_the_first_before_any_debugger(tmp_path):
    """A training script seeds before it builds the debugger: that first seed is shown too, not only later ones."""
    script = (
        "from msprobe.pytorch import PrecisionDebugger, seed_all\n"
        "seed_all(1)\n"
        f"debugger = PrecisionDebugger(task='statistics', level='L1', dump_path={str(tmp_path / 'dump')!r})\n"
        "seed_all(2)\n"
    )
    run = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120)
    assert run.returncode == 0, run.stderr
    shown = [line for line in run.stderr.splitlines() if "seed_all:" in line]
    assert [line.split("seed=")[1].split()[0] for line in shown] == ["1", "2"], run.stderr
