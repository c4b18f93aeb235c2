"""PtdbgDispatch: every ATen op re-run on the CPU in float64 and judged by the rule of seed 004."""

import csv
import subprocess
import sys
import textwrap

import numpy as np
import pytest
import torch

from msprobe.core.errors import UsageError
from msprobe.pytorch.precheck.online_dispatch import PtdbgDispatch, judge


def rows(folder):
    (path,) = list(folder.glob("msprobe_*_*/compare_result_rank0_*.csv"))
    with open(path, newline="") as handle:
        return list(csv.DictReader(handle))


def model_and_input():
    torch.manual_seed(0)
    return torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.GELU(), torch.nn.Linear(16, 2)), torch.randn(4, 8)


def test_forward_and_backward_ops_are_checked(tmp_path):
    model, x = model_and_input()
    with PtdbgDispatch(dump_mode="OFF", dump_path=str(tmp_path / "fw")):
        out = model(x)
    with PtdbgDispatch(dump_mode="OFF", dump_path=str(tmp_path / "bw"), tag="backward"):
        out.sum().backward()
    forward = rows(tmp_path / "fw")
    assert [r["API Name"] for r in forward] == [
        "t.0.output.0",
        "addmm.0.output.0",
        "gelu.0.output.0",
        "t.1.output.0",
        "addmm.1.output.0",
    ]
    assert all(r["Accuracy Reached or Not"] == "Yes" and r["Bench Dtype"] == "float64" for r in forward)
    backward = rows(tmp_path / "bw")
    assert any(r["API Name"].startswith("gelu_backward.0") for r in backward)
    assert list((tmp_path / "bw").glob("msprobe_backward_rank0_*"))
    # training is unaffected: the gradient is the one a run without the dispatch gets
    plain, same_x = model_and_input()
    plain(same_x).sum().backward()
    assert torch.equal(model[0].weight.grad, plain[0].weight.grad)


def test_dump_modes(tmp_path):
    model, x = model_and_input()
    with PtdbgDispatch(dump_mode="all", dump_path=str(tmp_path / "all")):
        model(x)
    with PtdbgDispatch(dump_mode="list", api_list=["gelu"], dump_path=str(tmp_path / "list")):
        model(x)
    all_files = {p.name for p in (tmp_path / "all").glob("*/npu/*.npy")}
    assert "addmm_0_input.0.npy" in all_files and "gelu_0_output.0.npy" in all_files
    listed = {p.name for p in (tmp_path / "list").glob("*/*/*.npy")}
    assert listed == {"gelu_0_input.0.npy", "gelu_0_output.0.npy"}


def test_worker_processes_give_the_same_rows(tmp_path):
    model, x = model_and_input()
    with PtdbgDispatch(dump_path=str(tmp_path / "one")):
        model(x)
    with PtdbgDispatch(dump_path=str(tmp_path / "two"), process_num=2):
        model(x)
    assert rows(tmp_path / "one") == rows(tmp_path / "two")


WRONG_KERNEL = textwrap.dedent(
    """
    import sys, torch
    from msprobe.pytorch.precheck.online_dispatch import PtdbgDispatch
    library = torch.library.Library("aten", "IMPL")
    def gelu(x, approximate="none"):  # a registered wrong kernel: shifted by 2, except in float64
        exact = x * 0.5 * (1.0 + torch.erf(x / 2 ** 0.5))
        return exact if x.dtype == torch.float64 else exact + 2.0
    library.impl("gelu", gelu, "CPU")
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.GELU(), torch.nn.Linear(16, 2))
    with PtdbgDispatch(dump_mode="auto", dump_path=sys.argv[1]):
        model(torch.randn(4, 8) * 10)
    """
)


def test_a_wrong_kernel_fails_and_its_data_is_kept(tmp_path):
    script = tmp_path / "wrong.py"
    script.write_text(WRONG_KERNEL)
    result = subprocess.run([sys.executable, str(script), str(tmp_path / "out")], capture_output=True, text=True)
    assert result.returncode == 0, result.stderr[-2000:]
    by_name = {r["API Name"]: r for r in rows(tmp_path / "out")}
    assert by_name["gelu.0.output.0"]["Accuracy Reached or Not"] == "No"
    assert float(by_name["gelu.0.output.0"]["MaxAbsError"]) > 0.001
    assert by_name["addmm.0.output.0"]["Accuracy Reached or Not"] == "Yes"
    assert "gelu.0 Failed" in result.stderr
    kept = {p.name for p in (tmp_path / "out").glob("*/*/*.npy")}
    assert kept == {"gelu_0_input.0.npy", "gelu_0_output.0.npy"}  # npu/ has input and output, cpu/ the output


def test_the_rule():
    same = np.ones(10)
    assert judge(same, same)[2] == "Yes"
    assert judge(same * 1.5, same)[2] == "Yes"  # a pure scaling keeps cosine 1; max abs error 0.5 <= 1
    assert judge(same * 3, same)[2] == "No"
    assert judge(np.array([1.0, -1.0]), np.array([1.0, 1.0]))[2] == "No"
    assert judge(np.array([np.inf]), np.array([1.0]))[3].startswith("inf/nan")


@pytest.mark.parametrize(
    "kwargs, message",
    [({"dump_mode": "some"}, "dump_mode"), ({"dump_mode": "list"}, "api_list"), ({"process_num": -1}, "process_num")],
)
def test_bad_arguments(tmp_path, kwargs, message):
    with pytest.raises(UsageError, match=message):
        PtdbgDispatch(dump_path=str(tmp_path), **kwargs)


def test_in_place_ops_are_checked_against_their_inputs_before_the_call(tmp_path):
    params = torch.nn.Linear(64, 64)
    optimizer = torch.optim.AdamW(params.parameters(), lr=0.1)
    params(torch.randn(8, 64)).sum().backward()
    with PtdbgDispatch(dump_path=str(tmp_path)):
        optimizer.step()
    found = rows(tmp_path)
    assert any(r["API Name"].startswith("lerp_") for r in found)
    assert all(r["Accuracy Reached or Not"] == "Yes" for r in found), [
        r for r in found if r["Accuracy Reached or Not"] != "Yes"
    ]
