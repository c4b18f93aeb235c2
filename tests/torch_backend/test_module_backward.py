"""Module backward entries as torch's full backward hooks report them (the reference's hooks), hand-derived.

Each model is small enough that the expected gradients follow from the chain rule by hand: sum() sends ones
back, a product by a constant multiplies them, and a module's share of an input's gradient excludes what a
residual connection adds.
"""

import json

import torch
from torch import nn

from msprobe.core.dump.reader import read_dump
from msprobe.pytorch import PrecisionDebugger


def dump(tmp_path, model, run, level="L0"):
    config = {"task": "tensor", "dump_path": str(tmp_path / "dump"), "level": level}
    (tmp_path / "config.json").write_text(json.dumps(config))
    debugger = PrecisionDebugger(config_path=str(tmp_path / "config.json"), model=model)
    debugger.start()
    result = run()
    debugger.stop()
    debugger.step()
    folder = tmp_path / "dump" / "step0" / "rank"
    construct = json.loads((folder / "construct.json").read_text())
    return read_dump(folder / "dump.json"), construct, result


def values(dump, item):
    """The saved tensor of one entry item (None for a null item)."""
    if item is None:
        return None
    return torch.load(dump.path.parent / "dump_tensor_data" / item["data_name"], weights_only=True)


class ReturnsWhatItUses(nn.Module):
    """Returns (3 * w, w) where w = 2 * x is also used for the first output, like attention weights."""

    def forward(self, x):
        w = x * 2.0
        return w * 3.0, w


class Outer(nn.Module):
    def __init__(self):
        super().__init__()
        self.inner = ReturnsWhatItUses()

    def forward(self, x):
        out, _weights = self.inner(x)  # the weights are dropped, as HuggingFace layers drop attention weights
        return out


def test_an_output_used_inside_reports_only_the_gradient_from_outside(tmp_path):
    model = Outer()
    x = torch.ones(3, requires_grad=True)
    data, _construct, _ = dump(tmp_path, model, lambda: model(x).sum().backward())
    entry = data.data["Module.inner.ReturnsWhatItUses.backward.0"]
    # outside, only output 0 is used, by sum(): ones; output 1 gets nothing from outside (its use inside, for
    # output 0, is the module's own business)
    assert values(data, entry["input"][0]).tolist() == [1.0, 1.0, 1.0]
    assert entry["input"][1] is None
    assert values(data, entry["output"][0]).tolist() == [6.0, 6.0, 6.0]  # d(3 * 2x)/dx
    assert x.grad.tolist() == [6.0, 6.0, 6.0]  # and training is what it is without the tool


class ReturnsAView(nn.Module):
    def forward(self, x):
        return (x * 2.0).view(2, 2)


class UpdatesInPlace(nn.Module):
    def __init__(self):
        super().__init__()
        self.viewer = ReturnsAView()

    def forward(self, x):
        h = self.viewer(x)
        h += 1.0  # in place on the view the submodule returned
        return h * 5.0


def test_a_returned_view_may_be_updated_in_place(tmp_path):
    model = UpdatesInPlace()
    x = torch.ones(4, requires_grad=True)

    def run():
        out = model(x)
        out.sum().backward()
        return out

    data, _construct, out = dump(tmp_path, model, run)
    assert out.tolist() == [[15.0, 15.0], [15.0, 15.0]]  # (2 * 1 + 1) * 5
    assert x.grad.tolist() == [10.0] * 4
    entry = data.data["Module.viewer.ReturnsAView.backward.0"]
    assert values(data, entry["input"][0]).tolist() == [[5.0, 5.0], [5.0, 5.0]]
    assert values(data, entry["output"][0]).tolist() == [10.0] * 4


class KeywordsOnly(nn.Module):
    def __init__(self):
        super().__init__()
        self.proj = nn.Linear(2, 2)

    def forward(self, *, hidden):
        return self.proj(hidden)


class CallsWithKeywords(nn.Module):
    def __init__(self):
        super().__init__()
        self.block = KeywordsOnly()

    def forward(self, x):
        return self.block(hidden=x * 1.0)


def test_a_module_called_with_keywords_only_closes_at_once(tmp_path):
    torch.manual_seed(0)
    model = CallsWithKeywords()
    x = torch.ones(1, 2, requires_grad=True)
    data, construct, _ = dump(tmp_path, model, lambda: model(x).sum().backward())
    block = data.data["Module.block.KeywordsOnly.backward.0"]
    assert block["output"] == []  # no positional argument: nothing to report
    assert values(data, block["input"][0]).tolist() == [[1.0, 1.0]]
    # its backward opened and closed when its output gradient arrived, before proj's ran: proj is filed
    # at the root, as the reference's stack of module backward hooks files it
    names = [n for n in data.data if n.endswith("backward.0")]
    assert names.index("Module.block.KeywordsOnly.backward.0") < names.index("Module.block.proj.Linear.backward.0")
    assert construct["Module.block.proj.Linear.backward.0"] is None


class Masked(nn.Module):
    def forward(self, x, mask):
        return x * mask


def test_a_positional_tensor_without_gradient_gets_zeros_once_another_needs_one(tmp_path):
    model = nn.Sequential()  # a container around it, as models are
    model.add_module("masked", Masked())
    x = torch.ones(2, requires_grad=True)
    mask = torch.tensor([1.0, 0.0])
    data, _construct, _ = dump(tmp_path, model, lambda: model.masked(x, mask).sum().backward())
    entry = data.data["Module.masked.Masked.backward.0"]
    assert values(data, entry["output"][0]).tolist() == [1.0, 0.0]  # d(x * mask)/dx = mask
    assert values(data, entry["output"][1]).tolist() == [0.0, 0.0]  # torch's hooks hand the mask zeros


class DropsNothing(nn.Module):
    def __init__(self):
        super().__init__()
        self.dropout = nn.Dropout(0.0)
        self.proj = nn.Linear(2, 2)

    def forward(self, x):
        return self.dropout(self.proj(x))


def test_a_call_inside_a_module_that_hands_its_input_back_is_filed_under_it(tmp_path):
    torch.manual_seed(0)
    model = DropsNothing()
    x = torch.ones(1, 2, requires_grad=True)
    data, construct, _ = dump(tmp_path, model, lambda: model(x).sum().backward(), level="mix")
    assert construct["Functional.dropout.0.backward"] == "Module.dropout.Dropout.backward.0"
    assert construct["Module.dropout.Dropout.backward.0"] is None
    assert construct["Module.proj.Linear.backward.0"] is None  # opened after the dropout closed
    names = list(data.data)
    assert names.index("Module.dropout.Dropout.backward.0") < names.index("Module.proj.Linear.backward.0")
