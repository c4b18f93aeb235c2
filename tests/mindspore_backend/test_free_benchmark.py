"""Free benchmark on MindSpore: fragile APIs flagged, robust ones not, fix hands back the precise result."""

import csv
import json

import mindspore as ms
import numpy as np
import pytest
from mindspore import Tensor, mint, ops
from test_dump import train

from msprobe.core.errors import UsageError
from msprobe.mindspore import PrecisionDebugger

ms.set_context(mode=ms.PYNATIVE_MODE)


def debugger(tmp_path, **section):
    config = {"task": "free_benchmark", "dump_path": str(tmp_path), "level": "L1", "free_benchmark": section}
    (tmp_path / "fb.json").write_text(json.dumps(config))
    return PrecisionDebugger(config_path=str(tmp_path / "fb.json"))


def rows(tmp_path):
    path = tmp_path / "free_benchmark.csv"
    return list(csv.DictReader(path.open())) if path.exists() else []


def test_catastrophic_cancellation_is_flagged_and_relu_is_not(tmp_path):
    d = debugger(tmp_path, pert_mode="bit_noise")
    a = Tensor(np.array([1.0, 2.0, 3.0], np.float32))
    b = Tensor(np.array([1.0 - 1e-6, 2.0 - 2e-6, 3.0 - 3e-6], np.float32))
    d.start()
    mint.sub(a, b)  # a tiny difference of large values: one ulp more or less in an input moves it a lot
    mint.nn.functional.relu(a)
    d.stop()
    d.step()
    found = rows(tmp_path)
    assert [row["api_name"] for row in found] == ["Mint.sub.0.forward"]
    assert found[0]["dtype"] == "float32" and float(found[0]["max_rel"]) > 2**-12


def test_fix_returns_the_higher_precision_result_in_the_original_dtype(tmp_path):
    d = debugger(tmp_path, handler_type="fix", list=["sub"])
    x = Tensor(np.array([4096.3, 4097.7], np.float32).astype(np.float16))
    d.start()
    out = ops.sub(x, Tensor(np.array([4096.0, 4096.0], np.float16)))
    d.stop()
    d.step()
    assert out.dtype == ms.float16


@pytest.mark.parametrize("mode", ["add_noise", "bit_noise", "no_change", "change_value"])
def test_other_perturbations_run(tmp_path, mode):
    d = debugger(tmp_path, pert_mode=mode, list=["matmul"])
    d.start()
    out = mint.matmul(Tensor(np.ones((4, 4), np.float32)), Tensor(np.ones((4, 4), np.float32)))
    d.stop()
    d.step()
    assert np.array_equal(out.asnumpy(), np.full((4, 4), 4.0, np.float32))


def test_backward_stage_flags_a_fragile_gradient_and_not_a_robust_one(tmp_path):
    d = debugger(tmp_path, fuzz_stage="backward", pert_mode="bit_noise", list=["var", "relu"])
    x = Tensor(np.array([1.0, 1.0 + 2e-6, 1.0 + 5e-6, 1.0 - 3e-6], np.float32))

    def loss(x):  # var's gradient 2(x - mean)/n cancels: one ulp more or less in x moves it by ~10%
        return ops.var(x) * 1e6 + mint.nn.functional.relu(x).sum()

    d.start()
    _, grad = ms.value_and_grad(loss)(x)
    d.stop()
    d.step()
    found = rows(tmp_path)
    assert [row["api_name"] for row in found] == ["Functional.var.0.backward"], found
    assert found[0]["stage"] == "backward"
    assert np.isfinite(grad.asnumpy()).all()  # the training's own gradient is untouched


def test_pytorch_only_options_are_refused(tmp_path):
    with pytest.raises(UsageError, match="to_cpu"):
        debugger(
            tmp_path / "x" if (tmp_path / "x").mkdir() is None else tmp_path, pert_mode="to_cpu", fuzz_device="cpu"
        ).start()


@pytest.mark.parametrize("mode", ["improve_precision", "add_noise", "bit_noise", "no_change", "change_value"])
def test_every_perturbation_checks_a_training_step_without_changing_it(tmp_path, mode, caplog):
    plain = train(tmp_path / "plain", "L1", "structure")
    checked = train(tmp_path / "fb", "L1", "free_benchmark", free_benchmark={"pert_mode": mode})
    assert checked == plain
    assert "msprobe" not in caplog.text  # every API checked: the 0-d loss, transposed inputs and all
