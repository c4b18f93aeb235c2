"""Task overflow_check on MindSpore: only the call where inf first appears is kept."""

import math

import mindspore as ms
import numpy as np
from mindspore import Tensor, mint, ops

from msprobe.core.dump.reader import read_dump
from msprobe.mindspore import PrecisionDebugger

ms.set_context(mode=ms.PYNATIVE_MODE)


def test_float16_overflow_is_the_only_entry(tmp_path):
    debugger = PrecisionDebugger(task="overflow_check", level="L1", dump_path=str(tmp_path))
    x = Tensor(np.full((4, 4), 300.0, np.float16))
    debugger.start()
    y = mint.matmul(x, x)  # 360000 > 65504: inf in float16
    mint.abs(y)  # its input is already inf: not an overflow of its own
    ops.add(x, x)  # finite
    debugger.stop()
    debugger.step()
    dump = read_dump(tmp_path / "step0" / "rank" / "dump.json")
    assert list(dump.data) == ["Mint.matmul.0.forward"]
    output = dump.data["Mint.matmul.0.forward"]["output"][0]
    assert output["Max"] == math.inf and output["data_name"].endswith(".npy")
    assert np.isinf(np.load(dump.tensor_dir() / output["data_name"])).all()


def test_nan_check_keeps_the_statistics_and_writes_no_tensor_files(tmp_path):
    debugger = PrecisionDebugger(task="nan_check", level="L1", dump_path=str(tmp_path))
    x = Tensor(np.full((4, 4), 300.0, np.float16))
    debugger.start()
    y = mint.matmul(x, x)  # 360000 > 65504: inf in float16
    mint.abs(y)
    debugger.stop()
    debugger.step()
    folder = tmp_path / "step0" / "rank"
    dump = read_dump(folder / "dump.json")
    assert list(dump.data) == ["Mint.matmul.0.forward"]
    output = dump.data["Mint.matmul.0.forward"]["output"][0]
    assert output["Max"] == math.inf and "Norm" in output and "data_name" not in output
    assert not (folder / "dump_tensor_data").exists()


def test_screening_tells_a_large_finite_sum_from_inf_and_nan(tmp_path):
    """One sum clears a finite tensor; a sum past float16's range alone is not an overflow."""
    debugger = PrecisionDebugger(task="overflow_check", level="L1", dump_path=str(tmp_path))
    big = Tensor(np.full((64,), 60000.0, np.float16))  # every value finite, their sum is not
    zero = Tensor(np.zeros((3,), np.float32))
    debugger.start()
    mint.abs(big)
    mint.div(zero, zero)  # 0/0: nan from finite inputs
    debugger.stop()
    debugger.step()
    dump = read_dump(tmp_path / "step0" / "rank" / "dump.json")
    assert list(dump.data) == ["Mint.div.0.forward"]
    assert math.isnan(dump.data["Mint.div.0.forward"]["output"][0]["Max"])


def test_decisions_taken_in_batches_see_each_call_as_it_was(tmp_path):
    """On CPU each call's check waits for the next batch; a write the dump sees decides what is waiting first."""
    debugger = PrecisionDebugger(task="overflow_check", level="L1", dump_path=str(tmp_path))
    x = Tensor(np.full((2, 2), 300.0, np.float16))
    debugger.start()
    y = mint.matmul(x, x)  # inf, then overwritten with finite values below
    ops.assign(y, Tensor(np.zeros((2, 2), np.float16)))
    debugger.stop()
    debugger.step()
    dump = read_dump(tmp_path / "step0" / "rank" / "dump.json")
    assert list(dump.data) == ["Mint.matmul.0.forward"]
    assert dump.data["Mint.matmul.0.forward"]["output"][0]["Max"] == math.inf  # as the call left it
    assert not y.asnumpy().any()
    # the stack is where the call was made, not where the batch was read
    assert any("test_overflow.py" in line for line in dump.stack["Mint.matmul.0.forward"])


def test_decisions_wait_for_the_batch_within_its_memory_bound(tmp_path, monkeypatch):
    from msprobe.mindspore.dump import tensors

    x = Tensor(np.full((2, 2), 300.0, np.float16))

    def journaled_after_one_call(path):
        debugger = PrecisionDebugger(task="overflow_check", level="L1", dump_path=str(path))
        debugger.start()
        mint.matmul(x, x)
        journal = path / "step0" / "rank" / ".dump.json.journal"
        names = list(read_dump(journal.parent).data) if journal.exists() else []
        debugger.stop()
        debugger.step()
        assert list(read_dump(path / "step0" / "rank").data) == ["Mint.matmul.0.forward"]
        return names

    assert journaled_after_one_call(tmp_path / "batched") == []  # decided at the next batch
    monkeypatch.setattr(tensors, "_SETTLE_BYTES", 1)  # the output it holds fills the batch: decided at once
    assert journaled_after_one_call(tmp_path / "bounded") == ["Mint.matmul.0.forward"]
