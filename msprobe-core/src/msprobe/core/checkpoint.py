"""Checkpoint compare: two checkpoints, tensor by tensor, with the compare's metrics.

Safetensors files and Hugging Face folders of them are read here, without
any framework; a framework's own formats (a torch ``state_dict``, a
Megatron checkpoint folder, a MindSpore ``.ckpt``) are read by its backend
(``Backend.load_checkpoint``). Names are matched as they are, or across
frameworks through the compare's mappings (``data_mapping`` for whole
names, ``layer_mapping`` for name segments, and MindSpore's parameter names
such as ``gamma`` and ``moving_mean`` turned into PyTorch's).

The result is mindstudio-probe 26.x's ``ckpt_similarity.json``: one object
per tensor with ``l2`` (the Euclidean distance), ``cos``, ``numel`` and
``shape``, plus the compare's error columns.
"""

from __future__ import annotations

import json
import logging
import math
import mmap
import struct
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from msprobe.core.compare.mapping import read_flat_mapping, read_layer_mapping
from msprobe.core.compare.metrics import tensor_metrics
from msprobe.core.errors import DataFileError
from msprobe.core.files import write_new_file

logger = logging.getLogger(__name__)

_SAFETENSORS_DTYPES = {
    "F64": np.float64,
    "F32": np.float32,
    "F16": np.float16,
    "I64": np.int64,
    "I32": np.int32,
    "I16": np.int16,
    "I8": np.int8,
    "U64": np.uint64,
    "U32": np.uint32,
    "U16": np.uint16,
    "U8": np.uint8,
    "BOOL": np.bool_,
}
_MOST_HEADER_BYTES = 100 << 20  # a header larger than this is no safetensors file of any real model

# MindSpore's parameter names where PyTorch's differ (the last segment of a name)
MINDSPORE_TO_TORCH = {
    "gamma": "weight",
    "beta": "bias",
    "moving_mean": "running_mean",
    "moving_variance": "running_var",
    "embedding_table": "weight",
}


@dataclass
class Checkpoint:
    """A checkpoint's tensors by name (numpy arrays), and what wrote it."""

    path: Path
    tensors: Mapping[str, np.ndarray]
    framework: str = ""  # "pytorch", "mindspore", or "" for a framework-free format


def read_safetensors(path: str | Path) -> dict[str, np.ndarray]:
    """The tensors of one ``.safetensors`` file, memory-mapped (nothing is executed, every offset is checked)."""
    path = Path(path)
    try:
        with open(path, "rb") as handle:
            size = path.stat().st_size
            if size < 8:
                raise DataFileError(path, "too short to be a safetensors file")
            (header_size,) = struct.unpack("<Q", handle.read(8))
            if header_size > min(_MOST_HEADER_BYTES, size - 8):
                raise DataFileError(path, f"header of {header_size} bytes does not fit the file")
            header = json.loads(handle.read(header_size))
            data = mmap.mmap(handle.fileno(), 0, access=mmap.ACCESS_READ) if size > 8 + header_size else b""
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise DataFileError(path, f"not a readable safetensors file ({exc.__class__.__name__}: {exc})") from None
    if not isinstance(header, dict):
        raise DataFileError(path, "safetensors header is not an object")
    start = 8 + header_size
    tensors = {}
    for name, info in header.items():
        if name == "__metadata__":
            continue
        tensors[name] = _safetensors_array(path, data, start, name, info)
    return tensors


def _safetensors_array(path: Path, data: Any, start: int, name: str, info: Any) -> np.ndarray:
    try:
        dtype_name, shape, (begin, end) = info["dtype"], [int(n) for n in info["shape"]], info["data_offsets"]
    except (TypeError, KeyError, ValueError) as exc:
        raise DataFileError(path, f"tensor {name!r}: malformed header entry ({exc})") from None
    if any(n < 0 for n in shape) or not (0 <= begin <= end <= len(data) - start):
        raise DataFileError(path, f"tensor {name!r}: shape or offsets outside the file")
    raw = np.frombuffer(data, dtype=np.uint8, count=end - begin, offset=start + begin) if end > begin else None
    count = math.prod(shape)  # Python integers: numpy's product wraps at 64 bits and could match any size
    if dtype_name == "BF16":  # numpy has no bfloat16: its bits are a float32's upper half
        if end - begin != 2 * count:
            raise DataFileError(path, f"tensor {name!r}: {end - begin} bytes for {count} bfloat16 values")
        halves = raw.view(np.uint16) if raw is not None else np.zeros(0, np.uint16)
        return (halves.astype(np.uint32) << 16).view(np.float32).reshape(shape)
    dtype = _SAFETENSORS_DTYPES.get(dtype_name)
    if dtype is None:
        raise DataFileError(path, f"tensor {name!r}: dtype {dtype_name} is not supported")
    if end - begin != count * np.dtype(dtype).itemsize:
        raise DataFileError(path, f"tensor {name!r}: {end - begin} bytes for {count} {dtype_name} values")
    values = raw.view(dtype) if raw is not None else np.zeros(0, dtype)
    return values.reshape(shape)


def _safetensors_folder(folder: Path) -> dict[str, np.ndarray]:
    """A Hugging Face model folder: one ``model.safetensors`` or shards (with or without their index file)."""
    files = sorted(folder.glob("*.safetensors"))
    tensors: dict[str, np.ndarray] = {}
    for file in files:
        for name, array in read_safetensors(file).items():
            if name in tensors:
                raise DataFileError(file, f"tensor {name!r} is in two shards")
            tensors[name] = array
    return tensors


def load_checkpoint(path: str | Path) -> Checkpoint:
    """Read a checkpoint: safetensors here, every other format by the backend that knows it."""
    path = Path(path)
    if not path.exists():
        raise DataFileError(path, "checkpoint not found")
    if path.is_file() and path.suffix == ".safetensors":
        return Checkpoint(path, read_safetensors(path))
    if path.is_dir() and any(path.glob("*.safetensors")):
        return Checkpoint(path, _safetensors_folder(path))
    from msprobe.core.plugins import get_registry

    tried = []
    for backend in get_registry().backends().values():
        if not backend.is_available():
            continue
        tried.append(backend.name)
        tensors = backend.load_checkpoint(path)
        if tensors is not None:
            return Checkpoint(path, tensors, backend.name)
    frameworks = f" (tried {', '.join(tried)})" if tried else " (no backend is installed)"
    raise DataFileError(
        path,
        "not a checkpoint msprobe reads: a .safetensors file or folder, a torch state_dict or Megatron "
        f"checkpoint folder (msprobe-torch), or a MindSpore .ckpt (msprobe-mindspore){frameworks}",
    )


def tensors_in(value: Any, is_tensor: Callable[[Any], bool], prefix: str = "") -> Iterator[tuple[str, Any]]:
    """Every tensor of a nested checkpoint object, named by its keys joined with dots."""
    if is_tensor(value):
        yield prefix, value
    elif isinstance(value, Mapping):
        for key, item in value.items():
            yield from tensors_in(item, is_tensor, f"{prefix}.{key}" if prefix else str(key))


def model_part(value: Any) -> Any:
    """The model's weights in a saved object: Megatron's ``model`` (``model0``... with virtual pipeline
    stages), a trainer's ``state_dict``, else the object itself."""
    if isinstance(value, Mapping):
        stages = sorted(key for key in value if isinstance(key, str) and key.startswith("model") and key[5:].isdigit())
        if "model" in value:
            return value["model"]
        if stages:
            return {key: value[key] for key in stages}
        if "state_dict" in value:
            return value["state_dict"]
    return value


class ParameterNames:
    """Turns a name of the first checkpoint into the name to look for in the second."""

    def __init__(
        self,
        cross_framework: bool = False,
        data_mapping: str | Path | None = None,
        layer_mapping: str | Path | None = None,
    ):
        self.whole = read_flat_mapping(data_mapping, "data_mapping") if data_mapping else {}
        self.segments = dict(MINDSPORE_TO_TORCH) if cross_framework else {}
        if layer_mapping:
            self.segments.update(read_layer_mapping(layer_mapping))

    def __call__(self, name: str) -> str:
        if name in self.whole:
            return self.whole[name]
        if not self.segments:
            return name
        return ".".join(self.segments.get(part, part) for part in name.split("."))


def _number(value: Any) -> Any:
    """A metric as JSON: a float, or the compare's word for why there is none ("N/A", "unsupported"...)."""
    if isinstance(value, (float, np.floating)):
        value = float(value)
        return value if np.isfinite(value) else str(value)
    if isinstance(value, (int, np.integer)):
        return int(value)
    return str(value)


def _cosine(a: np.ndarray, b: np.ndarray) -> Any:
    """<a, b> / (|a| |b|) in float64, as 26.x defines ``cos``; None where a norm is zero or not finite."""
    with np.errstate(over="ignore", invalid="ignore"):
        norms = float(np.linalg.norm(a)) * float(np.linalg.norm(b))
        if not np.isfinite(norms) or norms == 0.0:
            return None
        return _number(min(1.0, max(-1.0, float(a @ b) / norms)))  # rounding may step just past 1


def compare_tensors(first: np.ndarray, second: np.ndarray) -> dict[str, Any]:
    """26.x's fields (l2, cos, numel, shape) and the compare's error columns for one pair."""
    row: dict[str, Any] = {"numel": int(first.size), "shape": list(first.shape)}
    if first.shape != second.shape:
        row.update(l2=None, cos=None, note=f"shapes differ: {list(first.shape)} and {list(second.shape)}")
        return row
    a = np.asarray(first, dtype=np.float64).reshape(-1)
    b = np.asarray(second, dtype=np.float64).reshape(-1)
    with np.errstate(over="ignore", invalid="ignore"):
        row["l2"] = _number(np.linalg.norm(a - b)) if a.size else 0.0
    row["cos"] = _cosine(a, b)
    metrics = tensor_metrics(np.asarray(first), np.asarray(second))
    row["max_abs_err"] = _number(metrics.max_abs_err)
    row["max_relative_err"] = _number(metrics.max_relative_err)
    row["one_thousandth_err_ratio"] = _number(metrics.one_thousandth)
    row["five_thousandths_err_ratio"] = _number(metrics.five_thousandths)
    if metrics.message:
        row["note"] = metrics.message.strip()
    return row


@dataclass
class CheckpointComparison:
    rows: dict[str, dict[str, Any]]
    only_first: list[str]
    only_second: list[str]

    @property
    def differing(self) -> list[str]:
        return [name for name, row in self.rows.items() if row.get("l2") not in (0, 0.0)]


def compare_checkpoints(
    first: Checkpoint,
    second: Checkpoint,
    names: ParameterNames | None = None,
    progress: Callable[[], None] | None = None,
) -> CheckpointComparison:
    """Every tensor of ``first`` against its partner in ``second``; names only one side has are listed too."""
    names = names or ParameterNames(cross_framework=_crosses(first, second))
    rows: dict[str, dict[str, Any]] = {}
    matched: set[str] = set()
    only_first = []
    for name, array in first.tensors.items():
        partner = names(name)
        other = second.tensors.get(partner)
        if other is None:
            only_first.append(name)
            rows[name] = {"numel": int(array.size), "shape": list(array.shape), "l2": None, "cos": None,
                          "note": f"not in {second.path.name}"}  # fmt: skip
        else:
            matched.add(partner)
            rows[name] = compare_tensors(array, other)
            if partner != name:
                rows[name]["matched_name"] = partner
        if progress is not None:
            progress()
    only_second = [name for name in second.tensors if name not in matched]
    for name in only_second:
        array = second.tensors[name]
        rows[name] = {"numel": int(array.size), "shape": list(array.shape), "l2": None, "cos": None,
                      "note": f"not in {first.path.name}"}  # fmt: skip
    return CheckpointComparison(rows, only_first, only_second)


def _crosses(first: Checkpoint, second: Checkpoint) -> bool:
    return {first.framework, second.framework} == {"mindspore", "pytorch"}


def write_comparison(comparison: CheckpointComparison, output: str | Path) -> Path:
    """``ckpt_similarity.json``; an existing file is never overwritten (26.x refuses it too)."""
    output = Path(output)
    if output.exists():
        raise DataFileError(output, "exists already; choose another output path")
    text = json.dumps(comparison.rows, indent=4, ensure_ascii=False).encode()
    return write_new_file(output, lambda handle: handle.write(text))
