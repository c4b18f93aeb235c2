"""Checkpoint compare across frameworks: a MindSpore .ckpt against the PyTorch state_dict of the same weights.

MindSpore's LayerNorm keeps ``gamma`` and ``beta`` where PyTorch keeps
``weight`` and ``bias``; the compare's cross-framework names pair them.
"""

import json

import mindspore as ms
import numpy as np
import torch
from click.testing import CliRunner
from mindspore import nn

from msprobe.cli.main import cli


def test_the_same_weights_in_both_frameworks_agree(tmp_path):
    ms.set_seed(0)
    cell = nn.SequentialCell(nn.Dense(4, 3), nn.LayerNorm((3,)))
    for parameter in cell.get_parameters():  # not the initial ones: gamma and beta would be ones and zeros
        parameter.set_data(ms.Tensor(np.random.default_rng(1).standard_normal(parameter.shape).astype(np.float32)))
    ms.save_checkpoint(cell, str(tmp_path / "ms.ckpt"))
    weights = {p.name: torch.from_numpy(p.asnumpy().copy()) for p in cell.get_parameters()}
    renamed = {name.replace("gamma", "weight").replace("beta", "bias"): value for name, value in weights.items()}
    torch.save(renamed, tmp_path / "pt.pt")
    output = tmp_path / "out.json"
    result = CliRunner().invoke(
        cli, ["checkpoint_compare", str(tmp_path / "ms.ckpt"), str(tmp_path / "pt.pt"), "-o", str(output)]
    )
    assert result.exit_code == 0, result.output
    rows = json.loads(output.read_text())
    assert sorted(rows) == ["0.bias", "0.weight", "1.beta", "1.gamma"]
    assert rows["1.gamma"]["matched_name"] == "1.weight" and rows["1.beta"]["matched_name"] == "1.bias"
    assert all(row["l2"] == 0.0 and row["cos"] == 1.0 for row in rows.values())
    assert "4 tensors, 0 differ" in result.output
