"""config_check inside a MindSpore training script, and checkpoint compare of MindSpore .ckpt files."""

import json
import os
import subprocess
import sys
import textwrap

import mindspore as ms
import numpy as np
import pytest
from click.testing import CliRunner
from mindspore import nn

from msprobe.cli.main import cli
from msprobe.core.config_check import compare_packs

TRAINING = textwrap.dedent(
    """
    import sys
    from msprobe.core.config_check import ConfigChecker
    ConfigChecker.apply_patches("mindspore")
    import mindspore as ms
    import numpy as np
    from mindspore import nn
    ms.set_context(mode=ms.PYNATIVE_MODE)
    ms.set_seed(0)
    net = nn.Dense(4, 2)
    ConfigChecker(model=net, output_zip_path=sys.argv[1], fmk="mindspore")
    for step in range(2):
        batch = np.full((2, 4), float(step), np.float32)
        if step == 1 and sys.argv[2] == "changed":
            batch[1, 3] = -1.0
        net(ms.Tensor(batch))
    """
)


def test_a_changed_batch_is_named(tmp_path):
    (tmp_path / "train.py").write_text(TRAINING)
    packs = {}
    for run in ("same", "changed"):
        packs[run] = tmp_path / f"{run}.zip"
        subprocess.run([sys.executable, str(tmp_path / "train.py"), str(packs[run]), run], check=True, env=os.environ)
    result = compare_packs(packs["same"], packs["changed"], tmp_path / "result")
    differing = {item.item: [row["key"] for row in item.rows if row["verdict"] != "pass"] for item in result.items}
    assert differing["dataset"] == ["rank0/step1/args.0"]
    assert differing["weights"] == [] and differing["pip"] == [] and differing["random"] == []
    assert {item.item: item.verdict for item in result.items}["weights"] == "pass"


def test_ckpt_files_compare_tensor_by_tensor(tmp_path):
    ms.set_seed(0)
    net = nn.SequentialCell(nn.Dense(4, 3), nn.LayerNorm((3,)))
    ms.save_checkpoint(net, str(tmp_path / "a.ckpt"))
    before = {p.name: p.asnumpy().copy() for p in net.get_parameters()}
    for parameter in net.get_parameters():
        parameter.set_data(ms.Tensor(parameter.asnumpy() * 1.5 + 0.25))
    ms.save_checkpoint(net, str(tmp_path / "b.ckpt"))
    output = tmp_path / "out.json"
    result = CliRunner().invoke(cli, ["checkpoint_compare", str(tmp_path / "a.ckpt"), str(tmp_path / "b.ckpt"),
                                      "-o", str(output)])  # fmt: skip
    assert result.exit_code == 1, result.output  # every parameter changed
    rows = json.loads(output.read_text())
    assert sorted(rows) == sorted(before)
    for name, a in before.items():
        b = a * 1.5 + 0.25
        assert rows[name]["l2"] == pytest.approx(np.linalg.norm((a - b).astype(np.float64)), rel=1e-5)
