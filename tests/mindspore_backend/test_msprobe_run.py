"""``msprobe run -c config.json -- python train.py`` with a MindSpore script that holds no msprobe."""

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np

from msprobe.core.dump.reader import read_dump

BIN = Path(sys.executable).parent

TRAIN = """
import numpy as np
import mindspore as ms
from mindspore import nn, Tensor
ms.set_seed(0)
net = nn.SequentialCell(nn.Dense(4, 8), nn.ReLU(), nn.Dense(8, 2))
optimizer = nn.SGD(net.trainable_params(), learning_rate=0.1)
def forward(x):
    return net(x).sum()
grad_fn = ms.value_and_grad(forward, None, optimizer.parameters)
for step in range(3):
    x = Tensor(np.random.default_rng(step).standard_normal((5, 4)).astype(np.float32))
    loss, grads = grad_fn(x)
    optimizer(grads)
print("trained")
"""


def msprobe_run(folder: Path, script: str, **fields) -> subprocess.CompletedProcess:
    (folder / "train.py").write_text(textwrap.dedent(script))
    config = {"task": "statistics", "dump_path": str(folder / "dump"), "level": "mix", "rank": [], "step": []}
    (folder / "config.json").write_text(json.dumps({**config, **fields}))
    env = {key: value for key, value in os.environ.items() if key != "MSPROBE_DISABLE_PLUGINS"}
    env["PATH"] = f"{BIN}{os.pathsep}{env.get('PATH', '')}"
    command = [str(BIN / "msprobe"), "run", "-c", str(folder / "config.json"), "--", sys.executable, "train.py"]
    return subprocess.run(command, cwd=folder, env=env, capture_output=True, text=True, timeout=300)


def test_an_unchanged_mindspore_script_is_dumped_one_step_per_optimizer_call(tmp_path):
    finished = msprobe_run(tmp_path, TRAIN)
    assert finished.returncode == 0, finished.stderr[-3000:]
    assert finished.stdout.strip() == "trained"
    steps = sorted(path.parent.parent.name for path in (tmp_path / "dump").glob("step*/rank/dump.json"))
    assert steps == ["step0", "step1", "step2"]  # three optimizer calls, no empty fourth step
    for step in range(3):
        data = read_dump(tmp_path / "dump" / f"step{step}" / "rank").data
        assert {"Cell.0.Dense.forward.0", "Cell.2.Dense.backward.0", "Cell.0.Dense.parameters_grad"} <= set(data)
        assert any(name.startswith("Jit.SGD.") or ".SGD." in name for name in data)  # the update, in the step
        # each step's input is the script's own batch
        x = np.random.default_rng(step).standard_normal((5, 4)).astype(np.float32)
        given = data["Cell.0.Dense.forward.0"]["input_args"][0]
        assert given["shape"] == [5, 4]
        assert np.isclose(given["Max"], x.max()) and np.isclose(given["Min"], x.min())
        assert np.isclose(given["Mean"], x.mean(dtype=np.float64), rtol=1e-5)
    assert "the dump is in" in finished.stderr


def test_a_mindspore_process_that_calls_no_cell_says_it_dumped_nothing(tmp_path):
    finished = msprobe_run(tmp_path, "import mindspore\nprint('no cell')\n")
    assert finished.returncode == 0, finished.stderr[-3000:]
    assert "no mindspore.nn.Cell was called" in finished.stderr
    assert not (tmp_path / "dump").exists() or not any((tmp_path / "dump").iterdir())
