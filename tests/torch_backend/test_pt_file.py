"""The dump's own .pt writer: torch.save's pickle to the byte, and files torch.load reads every way."""

from __future__ import annotations

import io
import zipfile

import pytest
import torch

from msprobe.pytorch.dump.measuring import crc32_hex
from msprobe.pytorch.dump.pt_file import PtWriter, tensor_pickle

CASES = {
    "float32 2-d": lambda: torch.randn(3, 4),
    "0-d": lambda: torch.tensor(2.5),
    "empty": lambda: torch.zeros(0, 3),
    "float16": lambda: torch.randn(5).half(),
    "bfloat16": lambda: torch.randn(7).bfloat16(),
    "float64 4-d": lambda: torch.randn(2, 3, 4, 5).double(),
    "int64": lambda: torch.arange(10),
    "int8": lambda: torch.arange(6, dtype=torch.int8),
    "uint8": lambda: torch.arange(9, dtype=torch.uint8),
    "uint16": lambda: torch.tensor([1, 2, 65535], dtype=torch.uint16),
    "bool": lambda: torch.tensor([True, False, True]),
    "complex64": lambda: torch.randn(4, dtype=torch.complex64),
    "complex128": lambda: torch.randn(3, dtype=torch.complex128),
    "float8": lambda: torch.randn(3).to(torch.float8_e4m3fn),
    "large": lambda: torch.randn(300_000),
}


def _bits(tensor: torch.Tensor) -> torch.Tensor:
    return tensor.view(torch.uint8) if tensor.dtype == torch.float8_e4m3fn else tensor


def _torch_pickle(tensor: torch.Tensor) -> bytes:
    buffer = io.BytesIO()
    torch.save(tensor, buffer)
    with zipfile.ZipFile(buffer) as archive:
        return archive.read("archive/data.pkl")


@pytest.mark.parametrize("case", CASES)
def test_same_pickle_as_torch_save_and_loadable_every_way(tmp_path, case):
    writer = PtWriter()
    for attempt in range(2):  # the second file of a shape comes from the cached template
        tensor = CASES[case]()
        assert tensor_pickle(tensor) == _torch_pickle(tensor)
        path = tmp_path / f"{case}.{attempt}.pt"
        writer.save(tensor, path)
        for options in ({}, {"weights_only": True}, {"mmap": True, "weights_only": True}):
            loaded = torch.load(path, **options)
            assert loaded.dtype == tensor.dtype and loaded.shape == tensor.shape
            assert torch.equal(_bits(loaded), _bits(tensor)), options
        with zipfile.ZipFile(path) as archive:
            assert archive.testzip() is None


def test_unusual_tensors_go_through_torch_save(tmp_path):
    writer = PtWriter()
    conjugate = torch.randn(3, dtype=torch.complex64).conj()
    parameter = torch.nn.Parameter(torch.randn(2))
    view = torch.arange(10.0)[2:5]  # shares a larger storage
    for index, tensor in enumerate((conjugate, parameter, view)):
        writer.save(tensor, tmp_path / f"{index}.pt")
        loaded = torch.load(tmp_path / f"{index}.pt", weights_only=True)
        assert torch.equal(loaded, tensor.detach().resolve_conj())


def test_checksum_reads_the_values_of_lazy_views():
    values = torch.randn(4, dtype=torch.complex64)
    assert crc32_hex(values.conj()) == crc32_hex(values.conj().resolve_conj())
    matrix = torch.arange(12.0).reshape(3, 4)
    assert crc32_hex(matrix.t()) == crc32_hex(matrix.t().contiguous()) != crc32_hex(matrix)


def test_a_size_one_dimension_keeps_its_own_stride(tmp_path):
    writer = PtWriter()
    base = torch.arange(6.0)
    odd = base.as_strided((6, 1), (1, 7))  # contiguous by torch's rule, with another stride than (1, 1)
    for index, tensor in enumerate((base.reshape(6, 1), odd)):
        writer.save(tensor, tmp_path / f"{index}.pt")
        loaded = torch.load(tmp_path / f"{index}.pt", weights_only=True)
        assert loaded.stride() == tensor.stride() and torch.equal(loaded, tensor)


def test_fuzzed_pt_files_give_only_our_error(tmp_path):
    """Random and truncated .pt bytes (and a real file cut anywhere): DataFileError or a tensor, nothing else."""
    import io

    from hypothesis import HealthCheck, given, settings
    from hypothesis import strategies as st

    from msprobe.core.errors import MsprobeError
    from msprobe.pytorch.tensor_io import load_pt

    buffer = io.BytesIO()
    torch.save(torch.arange(6.0).reshape(2, 3), buffer)
    real = buffer.getvalue()

    @settings(max_examples=120, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
    @given(data=st.binary(max_size=120) | st.integers(0, len(real)).map(lambda cut: real[:cut]))
    def check(data):
        path = tmp_path / "x.pt"
        path.write_bytes(data)
        try:
            load_pt(path)
        except MsprobeError:
            pass

    check()


@pytest.mark.parametrize("shape", [(), (1,), (2, 3)])
def test_an_array_saved_as_a_tensor_keeps_its_shape(tmp_path, shape):
    """Merged tensors (ranks of a sharded run) are numpy arrays written as .pt: a 0-d loss stays 0-d."""
    import numpy as np

    from msprobe.pytorch.tensor_io import save_pt

    array = np.arange(int(np.prod(shape)), dtype=np.float32).reshape(shape)
    save_pt(array, tmp_path / "t.pt")
    loaded = torch.load(tmp_path / "t.pt")
    assert tuple(loaded.shape) == shape and loaded.numpy().tolist() == array.tolist()
