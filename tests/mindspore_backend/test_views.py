"""CPU MindSpore tensors, views (transposes, narrows, broadcasts) included, are read where they lie, without a copy."""

import gc
import json

import mindspore as ms
import numpy as np
import pytest
from mindspore import Tensor, mint, ops

from msprobe.core.dump.reader import read_dump
from msprobe.mindspore import PrecisionDebugger
from msprobe.mindspore.dump.tensors import crc32_hex, measure, to_numpy

ms.set_context(mode=ms.PYNATIVE_MODE)


def _base() -> Tensor:
    return ops.add(Tensor(np.arange(120, dtype=np.float32).reshape(2, 3, 4, 5) - 50.5), 0.0)


VIEWS = {
    "transpose": lambda b: b.transpose(0, 3, 1, 2),
    "narrow": lambda b: mint.narrow(b, 3, 1, 3),
    "stepped slice": lambda b: b[:, ::2],
    "broadcast": lambda b: ops.add(Tensor(np.arange(5, dtype=np.float32)), 0.0).broadcast_to((3, 5)),
    "chunk": lambda b: mint.chunk(b, 2, dim=3)[1],
    "diagonal": lambda b: ops.diagonal(b, 0, 2, 3),
    "float16": lambda b: b.astype(ms.float16).transpose(3, 2, 1, 0),
    "float64": lambda b: b.astype(ms.float64).swapaxes(1, 3),
    "int32": lambda b: b.astype(ms.int32).swapaxes(0, 2),
    "bool": lambda b: (b > 3).transpose(0, 2, 1, 3),
}


@pytest.mark.parametrize("make", list(VIEWS.values()), ids=list(VIEWS))
def test_a_view_reads_as_asnumpy_does_without_asking_mindspore_for_a_copy(make, monkeypatch):
    view = make(_base())
    assert not view.is_contiguous()  # else this case tests nothing
    expected = view.asnumpy()
    monkeypatch.setattr(ms.Tensor, "asnumpy", _refuse)
    monkeypatch.setattr(ms.Tensor, "contiguous", _refuse)
    host = to_numpy(view)
    assert host.dtype == expected.dtype and host.shape == expected.shape
    assert np.array_equal(host, expected)
    assert not host.flags.writeable  # the tensor's own memory: never written through


def _refuse(*_args, **_kwargs):
    raise AssertionError("a non-contiguous view was copied by MindSpore")


@pytest.mark.parametrize("make", [VIEWS["transpose"], VIEWS["float16"], VIEWS["bool"]], ids=["f32", "f16", "bool"])
def test_statistics_and_crc_of_a_view_are_those_of_its_values(make):
    view = make(_base())
    contiguous = Tensor(view.asnumpy())
    assert measure(view) == measure(contiguous)
    assert crc32_hex(view) == crc32_hex(contiguous)


def test_the_array_keeps_the_tensor_it_reads_alive():
    base = _base()
    view = base.transpose(0, 3, 1, 2)
    expected = view.asnumpy().copy()
    host = to_numpy(view)
    del base, view
    gc.collect()
    ops.add(Tensor(np.zeros((2, 3, 4, 5), np.float32)), 9.0).asnumpy()  # memory freed now would be reused here
    assert np.array_equal(host, expected)


def test_a_view_of_a_result_still_being_computed_reads_its_final_values():
    square = Tensor(np.eye(256, dtype=np.float32) * 1.01)
    product = square
    for _ in range(20):
        product = ops.matmul(product, square)  # PyNative runs these after Python has moved on
    host = to_numpy(product.transpose(1, 0))
    assert np.allclose(np.diag(host), 1.01**21, rtol=1e-5)


def test_a_dump_of_views_saves_and_measures_their_values(tmp_path):
    config = {"task": "tensor", "level": "L1", "dump_path": str(tmp_path / "dump")}
    (tmp_path / "c.json").write_text(json.dumps(config))
    debugger = PrecisionDebugger(config_path=str(tmp_path / "c.json"))
    base = _base()
    debugger.start()
    mint.neg(base.transpose(0, 3, 1, 2))
    mint.abs(mint.narrow(base, 3, 1, 3))
    debugger.stop()
    debugger.step()
    rank = tmp_path / "dump" / "step0" / "rank"
    data = read_dump(rank / "dump.json").data
    values = base.asnumpy()
    for name, expected in (
        ("Tensor.transpose.0.forward", values.transpose(0, 3, 1, 2)),
        ("Mint.narrow.0.forward", values[..., 1:4]),
        ("Mint.neg.0.forward", -values.transpose(0, 3, 1, 2)),
    ):
        entry = data[name]["output"][0]
        saved = np.load(rank / "dump_tensor_data" / entry["data_name"])
        assert np.array_equal(saved, expected), name
        assert entry["Max"] == float(expected.max()) and entry["Min"] == float(expected.min()), name
        assert entry["Norm"] == pytest.approx(float(np.linalg.norm(expected)), rel=1e-6), name


def test_contiguous_tensors_are_read_in_place_too(monkeypatch):
    tensors = [
        _base(),
        _base()[1],
        Tensor(np.arange(4)),
        Tensor(2.5, ms.float32),
        Tensor(np.array([True, False])),
        ms.Parameter(Tensor(np.ones((2, 3), np.float32)), name="weight"),
    ]
    expected = [tensor.asnumpy().copy() for tensor in tensors]
    monkeypatch.setattr(ms.Tensor, "asnumpy", _refuse)
    for tensor, values in zip(tensors, expected):
        host = to_numpy(tensor)
        assert host.dtype == values.dtype and np.array_equal(host, values)


def test_a_tensor_not_yet_initialized_is_read_through_mindspore():
    from mindspore.common.initializer import Normal

    tensor = Tensor(shape=(3, 2), dtype=ms.float32, init=Normal())  # no memory until its data is asked for
    assert tensor.has_init
    host = to_numpy(tensor)
    assert host.shape == (3, 2) and np.array_equal(host, tensor.asnumpy()) and host.std() > 0
