"""The op log: every ATen op as a dump entry, with a float64 norm hash, and two logs of different op streams
compared call for call."""

from __future__ import annotations

import json

import numpy as np
import pandas as pd
import pytest
import torch

from msprobe.core.compare.run import compare
from msprobe.pytorch.op_log import OpLog


class Block(torch.nn.Module):
    """fc1, layer norm, GELU (tanh), fc2, residual: with ``by_hand`` the norm and the GELU are written out in
    elementwise ops, as a decomposition would run them, so the two op streams differ in length and counts."""

    def __init__(self, by_hand: bool):
        super().__init__()
        torch.manual_seed(0)
        self.fc1, self.norm, self.fc2 = torch.nn.Linear(16, 32), torch.nn.LayerNorm(32), torch.nn.Linear(32, 16)
        self.by_hand = by_hand

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = self.fc1(x)
        if self.by_hand:
            mean = h.mean(-1, keepdim=True)
            var = ((h - mean) ** 2).mean(-1, keepdim=True)
            h = (h - mean) * torch.rsqrt(var + self.norm.eps) * self.norm.weight + self.norm.bias
            h = 0.5 * h * (1 + torch.tanh(0.7978845608028654 * (h + 0.044715 * h**3)))
        else:
            h = torch.nn.functional.gelu(self.norm(h), approximate="tanh")
        return x + self.fc2(h)


def run(folder, by_hand: bool, scale: float = 1.0) -> dict:
    block = Block(by_hand)
    with torch.no_grad():
        block.fc2.weight.mul_(scale)
    x = torch.randn(4, 16, generator=torch.Generator().manual_seed(1))
    with OpLog(folder):
        block(x).square().sum().backward()
    return json.loads((folder / "step0" / "rank" / "dump.json").read_text())


def test_each_op_is_an_entry_with_a_float64_norm_hash(tmp_path):
    dump = run(tmp_path / "log", by_hand=False)
    assert dump["level"] == "aten"
    addmm = dump["data"]["Aten.addmm.0.forward"]
    x = torch.randn(4, 16, generator=torch.Generator().manual_seed(1)).double()
    given = addmm["input_args"][1]
    assert given["shape"] == [4, 16] and given["norm_hash"] == pytest.approx(float(x.abs().sum()), rel=1e-12)
    assert given["Max"] == pytest.approx(float(x.max()), rel=1e-6)
    assert not any(name.startswith(("Aten.empty", "Aten.detach")) for name in dump["data"])


def _paired(tmp_path, scale: float = 1.0) -> tuple[pd.DataFrame, dict, dict]:
    ours = run(tmp_path / "fused", by_hand=False)
    theirs = run(tmp_path / "by_hand", by_hand=True, scale=scale)
    compare(
        {"npu_json_path": str(tmp_path / "fused/step0/rank/dump.json"),
         "bench_json_path": str(tmp_path / "by_hand/step0/rank/dump.json")},
        tmp_path / "out",
    )  # fmt: skip
    (csv,) = (tmp_path / "out").glob("compare_result_*.csv")
    return pd.read_csv(csv, keep_default_na=False), ours["data"], theirs["data"]


def test_two_op_streams_of_different_lengths_are_compared_call_for_call(tmp_path):
    table, ours, theirs = _paired(tmp_path)
    assert len(theirs) > len(ours) + 15  # the norm and the GELU by hand: many more calls
    pairs = {row["NPU Name"]: row["Bench Name"] for _, row in table.iterrows() if row["NPU Name"] != "N/A"}
    names = list(theirs)
    residual = next(name for name in names[names.index("Aten.addmm.1.forward") :] if name.startswith("Aten.add."))
    assert residual != "Aten.add.0.forward"  # the by-hand norm and GELU add first: the counts have shifted
    assert pairs["Aten.add.0.forward.output.0"] == residual + ".output.0"
    assert pairs["Aten.addmm.1.forward.output.0"] == "Aten.addmm.1.forward.output.0"
    assert pairs["Aten.gelu.0.forward.output.0"] == "N/A"  # no by-hand op stands in for the fused one
    # the paired outputs agree within float32 rounding: the same block computed two ways
    paired = table[
        (table["NPU Name"] != "N/A") & (table["Bench Name"] != "N/A") & table["NPU Name"].str.contains("output")
    ]
    npu_max = pd.to_numeric(paired["NPU max"], errors="coerce")
    bench_max = pd.to_numeric(paired["Bench max"], errors="coerce")
    assert np.allclose(npu_max, bench_max, rtol=1e-4, atol=1e-5, equal_nan=True)


def test_a_changed_weight_shows_first_at_its_own_call(tmp_path):
    table, _, _ = _paired(tmp_path, scale=1.01)
    rows = table[(table["NPU Name"] != "N/A") & (table["Bench Name"] != "N/A")]
    differing = rows[
        ~np.isclose(
            pd.to_numeric(rows["NPU max"], errors="coerce"),
            pd.to_numeric(rows["Bench max"], errors="coerce"),
            rtol=1e-4,
            atol=1e-5,
            equal_nan=True,
        )
    ]
    assert differing.iloc[0]["NPU Name"].startswith("Aten.t.")  # fc2's weight, transposed for addmm
    assert differing.iloc[0]["Bench Name"].startswith("Aten.t.")
    first_output = differing[differing["NPU Name"].str.contains("output")].iloc[0]
    assert first_output["NPU Name"] == "Aten.t.1.forward.output.0"
