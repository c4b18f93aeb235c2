"""Level L2 on CPU MindSpore: graph mode goes through MindSpore's own kernel dump, configured by msprobe."""

import json
import subprocess
import sys
import textwrap

import mindspore as ms
import numpy as np
import pytest

from msprobe.core.errors import UsageError
from msprobe.mindspore import PrecisionDebugger

GRAPH_RUN = textwrap.dedent(
    """
    import sys
    import mindspore as ms
    import numpy as np
    from mindspore import nn
    from msprobe.mindspore import PrecisionDebugger

    ms.set_context(mode=ms.GRAPH_MODE, device_target="CPU")
    debugger = PrecisionDebugger(config_path=sys.argv[1])
    debugger.start()  # before the network is built, as the reference asks


    class Net(nn.Cell):
        def __init__(self):
            super().__init__()
            self.fc = nn.Dense(3, 2)
            self.relu = nn.ReLU()

        def construct(self, x):
            return self.relu(self.fc(x))


    net = Net()
    for step in range(2):
        out = net(ms.Tensor(np.full((2, 3), step + 1, np.float32)))
        debugger.stop()
        debugger.step()
    np.save(sys.argv[2], out.asnumpy())
    """
)


def test_graph_mode_l2_writes_kernel_tensors(tmp_path):
    config = {"task": "tensor", "level": "L2", "dump_path": str(tmp_path / "dump"), "tensor": {"data_mode": ["output"]}}
    (tmp_path / "config.json").write_text(json.dumps(config))
    (tmp_path / "run.py").write_text(GRAPH_RUN)
    result = subprocess.run(
        [sys.executable, str(tmp_path / "run.py"), str(tmp_path / "config.json"), str(tmp_path / "out.npy")],
        capture_output=True,
        text=True,
        timeout=300,
        cwd=tmp_path,
    )
    assert result.returncode == 0, result.stderr[-3000:]
    settings = json.loads((tmp_path / "dump" / "kernel_config_0.json").read_text())["common_dump_settings"]
    assert settings["saved_data"] == "tensor" and settings["input_output"] == 2
    relu_outputs = sorted((tmp_path / "dump").rglob("ReLU.*.output.0.*.npy"))
    assert len(relu_outputs) == 2  # one per iteration
    assert not list((tmp_path / "dump").rglob("*.input.*.npy"))  # data_mode output
    [second] = [path for path in relu_outputs if path.parent.name == "1"]  # iteration folders 0 and 1
    np.testing.assert_allclose(np.load(second), np.load(tmp_path / "out.npy"), rtol=1e-6)


def test_statistics_on_cpu_falls_back_to_tensors_with_a_warning(tmp_path, caplog):
    from msprobe.mindspore.kernel_dump import dump_settings

    debugger = PrecisionDebugger(task="statistics", level="L2", dump_path=str(tmp_path), step=[0, 2])
    settings = dump_settings(debugger.config, "CPU")["common_dump_settings"]
    assert settings["saved_data"] == "tensor" and settings["iteration"] == "0|2"
    assert any("not statistics" in record.getMessage() for record in caplog.records)
    ascend = dump_settings(debugger.config, "Ascend")["common_dump_settings"]
    assert ascend["saved_data"] == "statistic" and "l2norm" in ascend["statistic_category"]


def test_graph_mode_refuses_hooking_levels_with_a_clear_message(tmp_path):
    ms.set_context(mode=ms.GRAPH_MODE)
    try:
        debugger = PrecisionDebugger(task="statistics", level="L1", dump_path=str(tmp_path))
        with pytest.raises(UsageError, match="PYNATIVE_MODE.*level L2"):
            debugger.start()
    finally:
        ms.set_context(mode=ms.PYNATIVE_MODE)
