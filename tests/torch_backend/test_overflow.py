"""Task overflow_check: only calls with finite inputs and inf/nan outputs are dumped.

Every case runs twice: on the CPU's path (exponent bits read in C) and on the
device path forced onto the CPU (sums waiting in the device batch, decided
at its read-back), with the same expected dump.
"""

import json
import math
import sys
import types

import pytest
import torch

from msprobe.core.dump.reader import read_dump
from msprobe.pytorch import PrecisionDebugger
from msprobe.pytorch.dump import device_batch


@pytest.fixture(autouse=True, params=["cpu path", "device path"])
def path(request, monkeypatch):
    if request.param == "device path":
        monkeypatch.setattr(device_batch, "FORCE_DEVICE_PATH", True)
    return request.param


class HalfNet(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = torch.nn.Linear(4, 4).half()
        self.act = torch.nn.ReLU()

    def forward(self, x, scale=300.0):
        y = self.fc(x)
        z = torch.matmul(y * scale, y.t() * scale)  # overflows in float16 for large scale
        return self.act(z)


def run(tmp_path, level="L1", overflow_nums=1, scales=(300.0,)):
    tmp_path.mkdir(parents=True, exist_ok=True)
    torch.manual_seed(0)  # fc's weights: every scale given overflows the matmul, whatever ran before
    model = HalfNet()
    config = {
        "task": "overflow_check",
        "dump_path": str(tmp_path),
        "level": level,
        "overflow_check": {"overflow_nums": overflow_nums},
    }
    (tmp_path / "c.json").write_text(json.dumps(config))
    debugger = PrecisionDebugger(config_path=str(tmp_path / "c.json"), model=model)
    debugger.start()
    x = torch.full((4, 4), 2.0, dtype=torch.float16)
    for scale in scales:
        model(x, scale)
    debugger.stop()
    debugger.step()
    return read_dump(tmp_path / "step0" / "rank" / "dump.json")


def test_only_the_overflowing_api_is_dumped_with_its_tensors(tmp_path):
    dump = run(tmp_path)
    assert list(dump.data) == ["Torch.matmul.0.forward"]  # relu of inf is not an overflow: its input was not finite
    entry = dump.data["Torch.matmul.0.forward"]
    assert not math.isfinite(entry["output"][0]["Max"])
    assert all(isinstance(leaf["Max"], float) for leaf in entry["input_args"])
    saved = torch.load(dump.tensor_dir() / entry["output"][0]["data_name"], weights_only=True)
    assert not torch.isfinite(saved).all()
    assert dump.task == "overflow_check"
    assert set(dump.stack) == set(dump.data)  # stacks only for what was kept


def test_overflow_nums_limits_and_minus_one_never_stops(tmp_path):
    assert list(run(tmp_path / "one", scales=(300.0, 400.0)).data) == ["Torch.matmul.0.forward"]
    assert list(run(tmp_path / "all", overflow_nums=-1, scales=(300.0, 400.0)).data) == [
        "Torch.matmul.0.forward",
        "Torch.matmul.1.forward",
    ]


def test_modules_at_l0(tmp_path):
    dump = run(tmp_path, level="L0")
    assert list(dump.data) == []  # fc's output is finite; act's input already is not: no module overflows
    dump = run(tmp_path / "mix", level="mix", overflow_nums=-1)
    assert "Torch.matmul.0.forward" in dump.data and "Module.act.ReLU.forward.0" not in dump.data
    assert set(dump.construct) <= set(dump.data)


@pytest.mark.parametrize(("overflow_nums", "folders"), [(1, ["step0", "step1"]), (-1, ["step0", "step1", "step2"])])
def test_steps_after_the_last_kept_overflow_get_no_folder(tmp_path, overflow_nums, folders):
    """As the reference leaves it (mindstudio-probe 1.2.2, run by hand on this script): a step without an
    overflow before the last kept one has its folder with an empty dump.json; none comes after it."""
    torch.manual_seed(0)
    model = HalfNet()
    config = {"task": "overflow_check", "dump_path": str(tmp_path), "level": "L1",
              "overflow_check": {"overflow_nums": overflow_nums}}  # fmt: skip
    (tmp_path / "c.json").write_text(json.dumps(config))
    debugger = PrecisionDebugger(config_path=str(tmp_path / "c.json"), model=model)
    x = torch.full((4, 4), 2.0, dtype=torch.float16)
    for scale in (0.001, 300.0, 0.001):  # only step 1 overflows
        debugger.start()
        model(x, scale)
        debugger.stop()
        debugger.step()
    assert sorted(path.name for path in tmp_path.glob("step*")) == folders
    assert read_dump(tmp_path / "step0" / "rank").data == {}
    assert list(read_dump(tmp_path / "step1" / "rank").data) == ["Torch.matmul.0.forward"]  # counted per step


def test_no_overflow_no_entries(tmp_path):
    assert run(tmp_path, scales=(0.001,)).data == {}


def test_hardware_flag_is_used_when_torch_npu_offers_it(tmp_path, monkeypatch):
    flags = iter([False, True] + [False] * 50)
    utils = types.SimpleNamespace(get_npu_overflow_flag=lambda: next(flags), clear_npu_overflow_flag=lambda: None)
    monkeypatch.setitem(sys.modules, "torch_npu", types.SimpleNamespace(npu=types.SimpleNamespace(utils=utils)))
    dump = run(tmp_path, scales=(0.001,))  # nothing is inf here: only the flag says the second call overflowed
    assert len(dump.data) == 1


def run_function(tmp_path, function):
    config = {
        "task": "overflow_check",
        "dump_path": str(tmp_path),
        "level": "L1",
        "overflow_check": {"overflow_nums": -1},
    }
    (tmp_path / "c.json").write_text(json.dumps(config))
    debugger = PrecisionDebugger(config_path=str(tmp_path / "c.json"))
    debugger.start()
    function()
    debugger.stop()
    debugger.step()
    return read_dump(tmp_path / "step0" / "rank" / "dump.json")


def test_large_finite_values_whose_sum_overflows_are_no_overflow(tmp_path):
    # the screen sums each output; a float16 sum of 8 x 40000 is inf although every element is finite
    def large_but_finite():
        torch.full((8,), 30000.0, dtype=torch.float16).add(10000.0)

    assert run_function(tmp_path, large_but_finite).data == {}


def test_an_in_place_call_that_overflows_its_finite_input_is_kept(tmp_path):
    def in_place():
        values = torch.full((4,), 300.0, dtype=torch.float16)
        values.mul_(300.0)  # 90000 is beyond float16
        values.add_(1.0)  # inf in, inf out: not an overflow of this call

    dump = run_function(tmp_path, in_place)
    assert list(dump.data) == ["Tensor.mul_.0.forward"]
    assert dump.data["Tensor.mul_.0.forward"]["output"][0]["Max"] == math.inf


def test_a_gradient_that_overflows_in_backward_is_kept(tmp_path):
    def backward_overflow():
        x = torch.full((4,), 300.0, dtype=torch.float16, requires_grad=True)
        y = torch.pow(x * 0.01, 2)  # 9: finite
        y.backward(torch.full_like(y, 20000.0))  # pow's gradient 2 * 3 * 20000 is beyond float16

    dump = run_function(tmp_path, backward_overflow)
    assert list(dump.data) == ["Torch.pow.0.backward"]  # mul's backward gets inf: not its overflow
    assert dump.data["Torch.pow.0.backward"]["output"][0]["Max"] == math.inf


def test_a_call_after_the_limit_is_not_kept_though_decided_later(tmp_path):
    """On the device path the decision waits for the batch: the limit still counts in the order calls ran."""
    config = {"task": "overflow_check", "dump_path": str(tmp_path), "level": "L1"}  # overflow_nums: 1
    (tmp_path / "c.json").write_text(json.dumps(config))
    debugger = PrecisionDebugger(config_path=str(tmp_path / "c.json"))
    debugger.start()
    big = torch.full((4,), 300.0, dtype=torch.float16)
    torch.mul(big, 300.0)
    torch.add(big, 65500.0)
    debugger.stop()
    debugger.step()
    assert list(read_dump(tmp_path / "step0" / "rank").data) == ["Torch.mul.0.forward"]


def test_an_output_overwritten_before_the_decision_is_still_kept(tmp_path, path):
    """On the device path the decision waits for the batch: an output made inf, then zeroed in place before the
    read-back, is an overflow all the same (its sum was taken at the call); its entry shows it as it is then."""

    def overwritten():
        values = torch.full((4,), 300.0, dtype=torch.float16)
        made = torch.mul(values, 300.0)  # inf
        made.zero_()

    dump = run_function(tmp_path, overwritten)
    assert list(dump.data) == ["Torch.mul.0.forward"]
    shown = dump.data["Torch.mul.0.forward"]["output"][0]["Max"]
    assert shown == (0.0 if path == "device path" else math.inf)


class Stack(torch.nn.Module):
    """Four blocks of linear, gelu, linear: a call's place is its block and its linear (2 * block, + 1)."""

    def __init__(self, dtype):
        super().__init__()
        torch.manual_seed(0)
        self.blocks = torch.nn.ModuleList(
            torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.GELU(), torch.nn.Linear(32, 16)) for _ in range(4)
        ).to(dtype)

    def forward(self, x):
        for block in self.blocks:
            x = x + block(x)
        return x


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16, torch.float32])
@pytest.mark.parametrize("place", [None, (0, 0), (1, 2), (2, 0), (3, 2)])
def test_the_first_overflow_is_named_where_it_was_injected(tmp_path, dtype, place):
    """One linear of one block given every weight half its dtype's largest value: its output, that value times a
    row's sum of inputs (one of them at least 2 in size, over the batch), is inf from finite inputs; no injection
    (None) is the negative control."""
    model = Stack(dtype)
    if place is not None:
        block, layer = place
        with torch.no_grad():
            model.blocks[block][layer].weight.fill_(torch.finfo(dtype).max / 2)
    config = {"task": "overflow_check", "dump_path": str(tmp_path), "level": "L1"}
    (tmp_path / "c.json").write_text(json.dumps(config))
    debugger = PrecisionDebugger(config_path=str(tmp_path / "c.json"), model=model)
    debugger.start()
    x = torch.randn(8, 16).to(dtype).requires_grad_()
    model(x).float().sum().backward()
    debugger.stop()
    debugger.step()
    folder = tmp_path / "step0" / "rank"
    found = list(read_dump(folder).data) if (folder / "dump.json").exists() else []
    if place is None:
        assert found == []
    else:
        block, layer = place
        assert found == [f"Functional.linear.{2 * block + layer // 2}.forward"]


def test_nan_check_names_the_call_with_statistics_and_no_tensor_files(tmp_path):
    """26.x's nan_check: the overflow check's decision, its entries' full statistics, no dump_tensor_data."""
    model = Stack(torch.float16)
    with torch.no_grad():
        model.blocks[2][0].weight.fill_(torch.finfo(torch.float16).max / 2)
    config = {"task": "nan_check", "dump_path": str(tmp_path), "level": "L1"}
    (tmp_path / "c.json").write_text(json.dumps(config))
    debugger = PrecisionDebugger(config_path=str(tmp_path / "c.json"), model=model)
    for _ in range(2):
        debugger.start()
        model(torch.randn(8, 16).half())
        debugger.stop()
        debugger.step()
    folder = tmp_path / "step0" / "rank"
    dump = read_dump(folder)
    assert list(dump.data) == ["Functional.linear.4.forward"]
    (output,) = dump.data["Functional.linear.4.forward"]["output"]
    assert output["Max"] == math.inf and "Mean" in output and "Norm" in output and "data_name" not in output
    assert not (folder / "dump_tensor_data").exists()
    assert dump.task == "overflow_check"  # its layout is the overflow check's, as every reader knows it
