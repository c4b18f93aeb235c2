"""parameters_grad entries of Megatron-style training, where gradients end up in ``param.main_grad``.

Megatron's data-parallel wrapper hooks each parameter's gradient
accumulator: it adds ``.grad`` into a float32 ``main_grad`` buffer and
empties ``.grad`` at once, before the module's other parameters are done.
With gradient-accumulation fusion the weight's gradient is written into
``main_grad`` directly, ``grad_added_to_main_grad`` is set and ``.grad`` is
a dummy. The expected values are the gradients autograd computes for a copy
of the model without the tool, measured with numpy.
"""

import copy
import csv
import json

import numpy as np
import pytest
import torch

from msprobe.pytorch import PrecisionDebugger
from msprobe.pytorch.dump import fast_path


def _model() -> torch.nn.Module:
    torch.manual_seed(0)
    return torch.nn.Sequential(torch.nn.Linear(4, 5), torch.nn.ReLU(), torch.nn.Linear(5, 2))


def _reference_grads(model: torch.nn.Module, x: torch.Tensor) -> dict[str, np.ndarray]:
    twin = copy.deepcopy(model)
    twin(x).sum().backward()
    return {name: p.grad.numpy().astype(np.float64) for name, p in twin.named_parameters()}


def _megatron_buffers(model: torch.nn.Module, fused: bool) -> list:
    """main_grad buffers filled by grad-accumulator hooks, as Megatron's DistributedDataParallel does."""
    kept = []
    for param in model.parameters():
        param.main_grad = torch.zeros_like(param, dtype=torch.float32)
        if fused and param.dim() == 2:  # the fused weight-gradient kernel: main_grad is written in backward
            param.grad_added_to_main_grad = False
            param.register_hook(lambda grad, p=param: _fused(p, grad))

        def move(*_unused, p=param):
            if not getattr(p, "grad_added_to_main_grad", False):
                p.main_grad.add_(p.grad)
            p.grad = None

        accumulator = param.expand_as(param).grad_fn.next_functions[0][0]
        accumulator.register_hook(move)
        kept.append(accumulator)  # the hook lives as long as its node
    return kept


def _fused(param: torch.Tensor, grad: torch.Tensor) -> torch.Tensor:
    param.main_grad.add_(grad)
    param.grad_added_to_main_grad = True
    return torch.zeros_like(grad)  # the dummy .grad Megatron hands autograd


@pytest.mark.parametrize("with_fast_path", [True, False], ids=["C", "Python"])
@pytest.mark.parametrize("fused", [False, True], ids=["ddp", "fused"])
def test_every_parameter_gradient_is_written_once_moved_to_main_grad(tmp_path, monkeypatch, fused, with_fast_path):
    monkeypatch.setattr(fast_path, "AVAILABLE", with_fast_path)
    model = _model()
    x = torch.randn(3, 4)
    expected = _reference_grads(model, x)
    kept = _megatron_buffers(model, fused)
    config = tmp_path / "config.json"
    config.write_text(json.dumps({"task": "statistics", "level": "L0", "dump_path": str(tmp_path / "dump")}))
    debugger = PrecisionDebugger(config_path=str(config), model=model)
    debugger.start()
    model(x).sum().backward()
    debugger.stop()
    debugger.step()
    assert kept
    data = json.loads((tmp_path / "dump" / "step0" / "rank" / "dump.json").read_text())["data"]
    for index in (0, 2):
        entry = data[f"Module.{index}.Linear.parameters_grad"]
        assert sorted(entry) == ["bias", "weight"]
        for name in ("weight", "bias"):
            want = expected[f"{index}.{name}"]
            (got,) = entry[name]  # the reference writes each parameter's gradient as a one-item list
            assert got["Max"] == pytest.approx(want.max(), rel=1e-6)
            assert got["Min"] == pytest.approx(want.min(), rel=1e-6)
            assert got["Mean"] == pytest.approx(want.mean(), rel=1e-5, abs=1e-7)
            assert got["Norm"] == pytest.approx(np.linalg.norm(want), rel=1e-6)


def test_grad_probe_reads_main_grad_when_grad_is_empty(tmp_path):
    model = _model()
    x = torch.randn(3, 4)
    expected = _reference_grads(model, x)
    kept = _megatron_buffers(model, fused=False)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.0)  # Megatron steps a float32 copy; here: nothing moves
    config = tmp_path / "config.json"
    config.write_text(json.dumps({"task": "grad_probe", "dump_path": str(tmp_path / "probe")}))
    debugger = PrecisionDebugger(config_path=str(config))
    debugger.monitor(model)
    debugger.start()
    model(x).sum().backward()
    assert kept and all(p.grad is None for p in model.parameters())
    optimizer.step()
    debugger.stop()
    debugger.step()
    from msprobe.core.grad_probe import wait_for_writers

    wait_for_writers()
    with open(tmp_path / "probe" / "rank0" / "grad_summary_0.csv") as handle:
        rows = {row["Param_name"]: row for row in csv.DictReader(handle)}
    assert sorted(rows) == sorted(expected)
    for name, want in expected.items():
        assert float(rows[name]["Max"]) == pytest.approx(want.max(), rel=1e-6)
        assert float(rows[name]["Norm"]) == pytest.approx(np.linalg.norm(want), rel=1e-6)
