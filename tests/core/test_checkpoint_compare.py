"""Checkpoint compare on safetensors checkpoints, which msprobe-core reads without any framework.

The files are built byte by byte from the safetensors format (an 8-byte
little-endian header length, a JSON header of dtype, shape and offsets,
then the raw data); the expected metrics are computed with numpy.
"""

import json
import struct

import numpy as np
import pytest
from click.testing import CliRunner

from msprobe.cli.main import cli
from msprobe.core.checkpoint import (
    ParameterNames,
    compare_checkpoints,
    load_checkpoint,
    read_safetensors,
)
from msprobe.core.errors import DataFileError


def write_safetensors(path, tensors, dtypes=None):
    header, blobs, offset = {}, [], 0
    for name, array in tensors.items():
        kind = (dtypes or {}).get(name) or {np.float32: "F32", np.float16: "F16", np.int64: "I64"}[array.dtype.type]
        data = array.tobytes() if kind != "BF16" else (array.astype(np.float32).view(np.uint32) >> 16).astype(
            np.uint16).tobytes()  # fmt: skip
        header[name] = {"dtype": kind, "shape": list(array.shape), "data_offsets": [offset, offset + len(data)]}
        blobs.append(data)
        offset += len(data)
    header["__metadata__"] = {"format": "pt"}
    text = json.dumps(header).encode()
    path.write_bytes(struct.pack("<Q", len(text)) + text + b"".join(blobs))
    return path


def two_steps(tmp_path):
    rng = np.random.default_rng(0)
    before = {
        "embed.weight": rng.standard_normal((8, 4)).astype(np.float32),
        "norm.weight": np.ones(4, np.float32),
        "head.bias": rng.standard_normal(2).astype(np.float16),
    }
    after = {name: (value - 0.01 * np.sign(value)).astype(value.dtype) for name, value in before.items()}
    return (
        write_safetensors(tmp_path / "step0.safetensors", before),
        write_safetensors(tmp_path / "step1.safetensors", after),
        before,
        after,
    )


def test_every_tensor_gets_26x_fields_matching_numpy(tmp_path):
    first, second, before, after = two_steps(tmp_path)
    comparison = compare_checkpoints(load_checkpoint(first), load_checkpoint(second))
    assert sorted(comparison.rows) == sorted(before)
    for name, a in before.items():
        b = after[name]
        row = comparison.rows[name]
        a64, b64 = a.astype(np.float64).ravel(), b.astype(np.float64).ravel()
        assert row["numel"] == a.size and row["shape"] == list(a.shape)
        assert row["l2"] == pytest.approx(np.linalg.norm(a64 - b64), rel=1e-9)
        cosine = a64 @ b64 / (np.linalg.norm(a64) * np.linalg.norm(b64))
        assert row["cos"] == pytest.approx(cosine, abs=1e-9)
        assert row["max_abs_err"] == pytest.approx(np.abs(a64 - b64).max(), rel=1e-6)
    assert comparison.differing == list(before)


def test_bfloat16_is_read_as_its_float32_values(tmp_path):
    values = np.array([1.0, -2.5, 3.140625, 0.0], np.float32)  # exact in bfloat16
    path = write_safetensors(tmp_path / "b.safetensors", {"w": values}, {"w": "BF16"})
    np.testing.assert_array_equal(read_safetensors(path)["w"], values)


def test_names_on_one_side_and_shape_changes_are_reported(tmp_path):
    a = write_safetensors(tmp_path / "a.safetensors", {"x": np.ones(3, np.float32), "old": np.ones(2, np.float32)})
    b = write_safetensors(tmp_path / "b.safetensors", {"x": np.ones(4, np.float32), "new": np.ones(2, np.float32)})
    comparison = compare_checkpoints(load_checkpoint(a), load_checkpoint(b))
    assert comparison.only_first == ["old"] and comparison.only_second == ["new"]
    assert comparison.rows["old"]["note"] == "not in b.safetensors"
    assert "shapes differ" in comparison.rows["x"]["note"] and comparison.rows["x"]["l2"] is None


def test_a_hugging_face_folder_of_shards_is_one_checkpoint(tmp_path):
    folder = tmp_path / "hf"
    folder.mkdir()
    write_safetensors(folder / "model-00001-of-00002.safetensors", {"a": np.zeros(2, np.float32)})
    write_safetensors(folder / "model-00002-of-00002.safetensors", {"b": np.ones(2, np.float32)})
    assert sorted(load_checkpoint(folder).tensors) == ["a", "b"]


def test_layer_and_data_mappings_rename_the_first_checkpoints_names(tmp_path):
    a = write_safetensors(tmp_path / "a.safetensors", {"norm.gamma": np.ones(2, np.float32),
                                                       "dense.weight": np.ones(2, np.float32)})  # fmt: skip
    b = write_safetensors(tmp_path / "b.safetensors", {"norm.weight": np.ones(2, np.float32),
                                                       "linear.weight": np.ones(2, np.float32)})  # fmt: skip
    (tmp_path / "data.yaml").write_text("dense.weight: linear.weight\n")
    (tmp_path / "layer.yaml").write_text("LayerNorm:\n  gamma: weight\n")
    names = ParameterNames(False, tmp_path / "data.yaml", tmp_path / "layer.yaml")
    comparison = compare_checkpoints(load_checkpoint(a), load_checkpoint(b), names)
    assert not comparison.only_first and not comparison.only_second and comparison.differing == []
    assert comparison.rows["norm.gamma"]["matched_name"] == "norm.weight"


def _with_header(header: bytes, data: bytes = b"") -> bytes:
    return struct.pack("<Q", len(header)) + header + data


@pytest.mark.parametrize(
    "content, problem",
    [
        (b"\x01", "too short"),
        (struct.pack("<Q", 10**12) + b"{}", "does not fit"),
        (_with_header(b"[]"), "not an object"),
        (_with_header(b'{"w": {"dtype": "F32", "shape": [4], "data_offsets": [0, 99]}}'), "outside"),
        (_with_header(b'{"w": {"dtype": "F32", "shape": [4], "data_offsets": [0, 4]}}', b"\0" * 4), "bytes for 4"),
        (_with_header(b'{"w": {"dtype": "F8_E9", "shape": [1], "data_offsets": [0, 1]}}', b"\0"), "not supported"),
        (_with_header(b'{"w": {"shape": [1]}}'), "malformed"),
        # sizes whose product is 2**64, 0 in 64-bit arithmetic: no values, yet not an empty tensor
        (
            _with_header(b'{"w": {"dtype": "F32", "shape": [4294967296, 4294967296], "data_offsets": [0, 0]}}', b"\0"),
            "0 bytes for 18446744073709551616 F32 values",
        ),
    ],
)
def test_a_malformed_file_is_one_error_naming_it(tmp_path, content, problem):
    path = tmp_path / "bad.safetensors"
    path.write_bytes(content)
    with pytest.raises(DataFileError, match=problem) as error:
        read_safetensors(path)
    assert str(path) in str(error.value)


@pytest.mark.parametrize("command", [["checkpoint_compare"], ["config_check", "-c"]])
def test_the_command_writes_the_json_and_never_overwrites_it(tmp_path, command):
    first, second, before, _ = two_steps(tmp_path)
    output = tmp_path / "similarity.json"
    result = CliRunner().invoke(cli, [*command, str(first), str(second), "-o", str(output)])
    assert result.exit_code == 1, result.output  # tensors differ: as compare says it
    assert f"{len(before)} tensors, {len(before)} differ (first: embed.weight)" in result.output
    assert sorted(json.loads(output.read_text())) == sorted(before)
    again = CliRunner().invoke(cli, [*command, str(first), str(second), "-o", str(output)])
    assert again.exit_code == 2 and "exists already" in again.output


def test_an_unknown_file_is_named(tmp_path):
    odd = tmp_path / "weights.ckpt2"
    odd.write_bytes(b"nothing")
    result = CliRunner().invoke(cli, ["checkpoint_compare", str(odd), str(odd), "-o", str(tmp_path / "o.json")])
    assert result.exit_code != 0 and str(odd) in result.output and "not a checkpoint msprobe reads" in result.output
