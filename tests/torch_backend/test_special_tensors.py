"""Sparse and quantized tensors get statistics like any other (they used to get an error and no entry)."""

import json
import math
import zlib

import pytest
import torch
from summaries import summary_of

from msprobe.core.dump.reader import read_dump
from msprobe.pytorch import PrecisionDebugger
from msprobe.pytorch.dump.tensors import TensorSummarizer

KEYS = ("Max", "Min", "Mean", "Norm")


def _close(summary, dense):
    expected = summary_of(TensorSummarizer("statistics", "statistics"), dense)
    for key in KEYS:
        assert math.isclose(summary[key], expected[key], rel_tol=1e-6, abs_tol=1e-7), (key, summary[key], expected[key])


@pytest.mark.parametrize("layout", ["coo", "csr", "csc"])
def test_sparse_statistics_count_the_zeros_not_stored(layout):
    torch.manual_seed(0)
    dense = torch.randn(6, 7).abs() + 0.5  # all positive: Min is a zero that is not stored
    dense[dense < 1.0] = 0.0
    sparse = {"coo": dense.to_sparse(), "csr": dense.to_sparse_csr(), "csc": dense.to_sparse_csc()}[layout]
    summary = summary_of(TensorSummarizer("statistics", "md5"), sparse)
    _close(summary, dense)
    assert summary["Min"] == 0.0 and summary["shape"] == [6, 7]
    assert summary["md5"] == f"{zlib.crc32(dense.numpy().tobytes()):08x}"


def test_uncoalesced_duplicates_add_up_and_an_empty_sparse_tensor_is_zeros():
    indices = torch.tensor([[0, 0, 2], [1, 1, 3]])
    sparse = torch.sparse_coo_tensor(indices, torch.tensor([1.5, 2.0, -4.0]), (3, 5))
    _close(summary_of(TensorSummarizer("statistics", "statistics"), sparse), sparse.to_dense())
    empty = torch.sparse_coo_tensor(torch.zeros(2, 0, dtype=torch.long), torch.zeros(0), (3, 5))
    assert [summary_of(TensorSummarizer("statistics", "statistics"), empty)[key] for key in KEYS] == [0.0] * 4


def test_quantized_statistics_are_those_of_the_dequantized_values():
    values = torch.tensor([-1.0, 0.25, 0.5, 2.0])
    quantized = torch.quantize_per_tensor(values, 0.25, 2, torch.qint8)
    summary = summary_of(TensorSummarizer("statistics", "md5"), quantized)
    _close(summary, quantized.dequantize())
    assert summary["dtype"] == "torch.qint8"
    assert summary["md5"] == f"{zlib.crc32(quantized.int_repr().numpy().tobytes()):08x}"


@pytest.mark.parametrize("task", ["statistics", "tensor"])
def test_a_sparse_embedding_gradient_is_dumped(tmp_path, task):
    torch.manual_seed(0)
    embedding = torch.nn.Embedding(20, 4, sparse=True)
    config = tmp_path / "config.json"
    config.write_text(json.dumps({"task": task, "level": "L1", "dump_path": str(tmp_path / "dump")}))
    debugger = PrecisionDebugger(config_path=str(config))
    debugger.start()
    embedding(torch.tensor([1, 3, 3])).sum().backward()
    debugger.stop()
    debugger.step()
    data = read_dump(tmp_path / "dump" / "step0" / "rank" / "dump.json").data
    gradient = data["Functional.embedding.0.backward"]["output"][0]  # the weight's (the only input needing one): sparse
    _close(gradient, embedding.weight.grad.to_dense())
    if task == "tensor":
        saved = torch.load(tmp_path / "dump" / "step0" / "rank" / "dump_tensor_data" / gradient["data_name"])
        assert saved.is_sparse and torch.equal(saved.to_dense(), embedding.weight.grad.to_dense())


@pytest.mark.parametrize("layout", ["coo", "uncoalesced", "hybrid", "csr", "bsr", "empty"])
def test_the_crc_of_a_sparse_tensor_is_that_of_its_dense_form_taken_in_pieces(layout, monkeypatch):
    """The dense form is built a block of rows at a time (here a few rows, so the pieces meet in every test)."""
    from msprobe.pytorch.dump import special_tensors

    monkeypatch.setattr(special_tensors, "DENSE_PIECE_BYTES", 3 * 8 * 4)  # three rows of eight float32 per piece
    torch.manual_seed(0)
    dense = torch.randn(10, 8)
    dense[dense.abs() < 0.8] = 0.0
    dense[4:7] = 0.0  # a whole piece without stored values
    if layout == "uncoalesced":
        sparse = torch.sparse_coo_tensor(torch.tensor([[9, 0, 9], [7, 1, 7]]), torch.tensor([1.0, 2.0, 0.5]), (10, 8))
        dense = sparse.to_dense()
    elif layout == "hybrid":
        sparse = dense.to_sparse(1)  # rows stored densely: values of shape (nnz, 8)
    elif layout == "empty":
        sparse = torch.sparse_coo_tensor(torch.zeros(2, 0, dtype=torch.long), torch.zeros(0), (10, 8))
        dense = sparse.to_dense()
    else:
        sparse = {"coo": dense.to_sparse(), "csr": dense.to_sparse_csr(), "bsr": dense.to_sparse_bsr((2, 2))}[layout]
    expected = f"{zlib.crc32(dense.numpy().tobytes()):08x}"

    def whole(*args, **kwargs):
        raise AssertionError("the whole dense form was built")

    monkeypatch.setattr(torch.Tensor, "to_dense", whole)
    assert special_tensors.sparse_crc32_hex(sparse) == expected
    assert summary_of(TensorSummarizer("statistics", "md5"), sparse)["md5"] == expected


def test_the_summarizer_keeps_the_core_s_contract():
    from msprobe.core.dump.summarizer import TensorSummarizer as Contract

    for task in ("statistics", "tensor", "overflow_check", "structure"):
        summarizer = TensorSummarizer(task, "statistics")
        assert isinstance(summarizer, Contract), task
        assert summarizer.caches == (task != "structure")
    assert not isinstance(object(), Contract)  # the check can fail
