import numpy as np
import pytest
from mindspore import Tensor, nn, ops

import msprobe.mindspore as mm
from msprobe import core
from msprobe.core.errors import DataFileError, UsageError
from msprobe.core.plugins import get_registry
from msprobe.mindspore.common.utils import MsprobeStep


def test_plugin_is_discovered_through_its_entry_point():
    backend = get_registry().find_backend("ms")
    assert backend.name == "mindspore" and backend.is_available()
    assert backend.owns(nn.Dense(2, 2)) and not backend.owns(np.zeros(1))


def test_front_door_routes_a_cell(tmp_path):
    debugger = core.PrecisionDebugger(dump_path=str(tmp_path), level="L0", model=nn.Dense(2, 2))
    assert debugger.framework == "mindspore"
    assert isinstance(debugger.debugger, mm.PrecisionDebugger)


def test_bad_calls(tmp_path):
    with pytest.raises(UsageError, match="model must be a mindspore model"):
        mm.PrecisionDebugger(dump_path=str(tmp_path), model=[nn.Dense(1, 1), "x"])
    with pytest.raises(UsageError, match="stop\\(\\) was called before start\\(\\)"):
        mm.PrecisionDebugger(dump_path=str(tmp_path)).stop()


def test_npy_files_round_trip(tmp_path):
    backend = get_registry().find_backend("mindspore")
    backend.save_tensor(np.arange(4, dtype=np.float16), tmp_path / "a.npy")
    assert backend.load_tensor(tmp_path / "a.npy").dtype == np.float16
    (tmp_path / "bad.npy").write_bytes(b"garbage")
    with pytest.raises(DataFileError, match="bad.npy"):
        backend.load_tensor(tmp_path / "bad.npy")


def test_seed_all_repeats_random_draws():
    mm.seed_all(5)
    first = ops.standard_normal((4,)).asnumpy()
    mm.seed_all(5)
    assert np.array_equal(first, ops.standard_normal((4,)).asnumpy())
    with pytest.raises(UsageError):
        mm.seed_all("5")


def test_msprobe_step_drives_the_debugger():
    calls = []

    class Recorder:
        def start(self):
            calls.append("start")

        def stop(self):
            calls.append("stop")

        def step(self):
            calls.append("step")

    callback = MsprobeStep(Recorder())
    callback.on_train_step_begin(None)
    callback.on_train_step_end(None)
    assert calls == ["start", "stop", "step"]
    assert Tensor(np.ones(1)).shape == (1,)
