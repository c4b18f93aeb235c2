"""Tensor files named in a dump are read only from inside that dump's folder, and only regular files."""

import json
import os
import threading

import numpy as np
import pytest
from click.testing import CliRunner

from msprobe.cli.main import cli


def _tensor_dump(folder, data_name):
    """A one-entry tensor dump of .npy files whose output's data_name is ``data_name``."""
    tensors = folder / "dump_tensor_data"
    tensors.mkdir(parents=True)
    np.save(tensors / "Mint.abs.0.forward.input.0.npy", np.array([1.0, -2.0], dtype=np.float32))
    np.save(tensors / "Mint.abs.0.forward.output.0.npy", np.array([1.0, 2.0], dtype=np.float32))
    summary = {"type": "mindspore.Tensor", "dtype": "Float32", "shape": [2], "Max": 2.0, "Min": 1.0}
    entry = {
        "input_args": [{**summary, "data_name": "Mint.abs.0.forward.input.0.npy"}],
        "input_kwargs": {},
        "output": [{**summary, "data_name": data_name}],
    }
    data = {"task": "tensor", "level": "L1", "framework": "mindspore", "data": {"Mint.abs.0.forward": entry}}
    (folder / "dump.json").write_text(json.dumps(data))
    return folder / "dump.json"


def _compare(tmp_path, npu):
    bench = _tensor_dump(tmp_path / "bench", "Mint.abs.0.forward.output.0.npy")
    config = tmp_path / "compare.json"
    config.write_text(json.dumps({"npu_path": str(npu), "bench_path": str(bench)}))
    return CliRunner().invoke(cli, ["compare", "-i", str(config), "-o", str(tmp_path / "out")])


@pytest.mark.parametrize("data_name", ["../../secret.npy", "/etc/passwd", "sub/../../x.npy"])
def test_a_data_name_outside_the_dump_folder_is_refused_naming_the_entry(tmp_path, data_name):
    (tmp_path / "secret.npy").write_bytes(b"not for us")
    result = _compare(tmp_path, _tensor_dump(tmp_path / "npu", data_name))
    assert result.exit_code != 0 and "Traceback" not in result.output
    assert "entry 'Mint.abs.0.forward'" in result.output and repr(data_name) in result.output, result.output


def test_a_fifo_named_by_a_dump_is_refused_without_hanging(tmp_path):
    npu = _tensor_dump(tmp_path / "npu", "Mint.abs.0.forward.output.0.npy")
    fifo = tmp_path / "npu" / "dump_tensor_data" / "Mint.abs.0.forward.output.0.npy"
    fifo.unlink()
    os.mkfifo(fifo)
    outcome = {}
    worker = threading.Thread(target=lambda: outcome.update(result=_compare(tmp_path, npu)), daemon=True)
    worker.start()
    worker.join(timeout=30)
    if worker.is_alive():  # unblock the reader so the test process can end, then fail
        with open(fifo, "wb"):
            pass
        pytest.fail("compare hung on a FIFO")
    result = outcome["result"]
    assert result.exit_code != 0 and "is not a regular file" in result.output, result.output


def test_a_regular_file_inside_the_folder_is_read(tmp_path):
    result = _compare(tmp_path, _tensor_dump(tmp_path / "npu", "Mint.abs.0.forward.output.0.npy"))
    assert result.exit_code == 0, result.output
