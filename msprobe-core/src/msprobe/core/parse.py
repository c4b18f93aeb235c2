"""Data parse: look at and compare single tensor files (.npy, or a backend's format such as .pt).

The framework-neutral logic of ``msprobe parse``; the CLI only formats it.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from msprobe.core.compare.metrics import tensor_metrics
from msprobe.core.dump.reader import read_dump
from msprobe.core.errors import DataFileError
from msprobe.core.files import regular_file, write_new_file
from msprobe.core.tensor_files import backend_for, load_npy, save_npy


def msaccucmp_path() -> Path | None:
    home = os.environ.get("ASCEND_TOOLKIT_HOME") or "/usr/local/Ascend/ascend-toolkit/latest"
    path = Path(home, "tools", "operator_cmp", "compare", "msaccucmp.py")
    return path if path.exists() else None


def acl_refusal() -> str:
    """Why cad/vc/dc (Ascend kernel .bin data) do not run here, and what to do instead."""
    tool = msaccucmp_path()
    if tool is None:
        return (
            "parsing Ascend kernel dump (.bin) data needs the msaccucmp tool of Ascend CANN, which is not installed "
            "here; convert on a machine with CANN, then use 'pt', 'cn' and 'convert' on the .npy files"
        )
    return (
        f"kernel dump (.bin) conversion is not part of this msprobe; run CANN's tool directly: python3 {tool} "
        "convert -d DUMP_DIR -out OUTPUT, then use 'pt', 'cn' and 'convert' on the .npy files"
    )


def load_tensor(path: str | Path) -> np.ndarray:
    file = regular_file(path, "tensor file")
    array = load_npy(file) if file.suffix == ".npy" else np.asanyarray(backend_for(file.suffix).load_tensor(file))
    if array.dtype.kind not in "biufc":
        raise DataFileError(file, f"holds {array.dtype} values, not numbers")
    return array


def save_tensor(array: np.ndarray, path: str | Path) -> None:
    file = Path(path)
    if file.suffix == ".npy":
        save_npy(array, file)
    else:
        backend_for(file.suffix).save_tensor(array, file)


@dataclass
class Summary:
    shape: tuple
    dtype: str
    maximum: float | None
    minimum: float | None
    mean: float | None

    def line(self) -> str:
        def fmt(value: float | None) -> str:
            return "N/A" if value is None else f"{value:.6g}"

        return (
            f"[Shape: {self.shape}] [Dtype: {self.dtype}] [Max: {fmt(self.maximum)}] "
            f"[Min: {fmt(self.minimum)}] [Mean: {fmt(self.mean)}]"
        )


def summarize(array: np.ndarray, dtype: str | None = None) -> Summary:
    """Max, Min and Mean of all the values: a nan among them shows as nan (it used to be skipped, hiding it).
    ``dtype``: the file's own dtype where the array was widened to be read (bfloat16 to float32)."""
    shown = dtype or str(array.dtype)
    if array.size == 0:
        return Summary(array.shape, shown, None, None, None)
    data = np.abs(array) if np.iscomplexobj(array) else array.astype(np.float64)
    with np.errstate(invalid="ignore", over="ignore"):
        return Summary(array.shape, shown, float(np.max(data)), float(np.min(data)), float(np.mean(data)))


def save_text(array: np.ndarray, path: str | Path) -> Path:
    target = Path(f"{path}.txt")
    return write_new_file(target, lambda handle: np.savetxt(handle, np.asarray(array).reshape(-1), fmt="%.10g"))


@dataclass
class Comparison:
    metrics: Any
    left: Summary
    right: Summary
    errors: list[tuple[int, float, float, float]]  # index, left, right, |diff| of elements over tolerance
    error_count: int
    top: list[tuple[int, float, float, float]]  # the first elements, for a look


def compare_arrays(
    left: np.ndarray, right: np.ndarray, count: int = 20, atol: float = 0.001, rtol: float = 0.001
) -> Comparison:
    metrics = tensor_metrics(left, right)
    errors: list[tuple[int, float, float, float]] = []
    top: list[tuple[int, float, float, float]] = []
    error_count = 0
    if left.shape == right.shape and left.size:
        a = left.astype(np.float64).ravel()
        b = right.astype(np.float64).ravel()
        diff = np.abs(a - b)
        bad = np.flatnonzero((diff > atol) & (diff > rtol * np.abs(b)))
        error_count = int(bad.size)
        errors = [(int(i), float(a[i]), float(b[i]), float(diff[i])) for i in bad[:count]]
        top = [(i, float(a[i]), float(b[i]), float(diff[i])) for i in range(min(count, a.size))]
    return Comparison(metrics, summarize(left), summarize(right), errors, error_count, top)


def api_info(dump_json: str | Path, api_name: str) -> tuple[list[str], list[str]]:
    """Statistic lines and stack of one dump.json entry; '_' may stand for '.' as in the reference."""
    dump = read_dump(dump_json)
    name = api_name if api_name in dump.data else api_name.replace("_", ".")
    if name not in dump.data:
        close = [n for n in dump.data if api_name.replace("_", ".") in n][:5]
        hint = f" (similar: {', '.join(close)})" if close else ""
        raise DataFileError(dump.path, f"has no entry '{api_name}'{hint}")
    lines = []

    def walk(value: Any, label: str) -> None:
        if isinstance(value, dict) and "dtype" in value:
            lines.append(
                f"[{label}][dtype: {value['dtype']}][shape: {value.get('shape')}][max: {value.get('Max')}]"
                f"[min: {value.get('Min')}][mean: {value.get('Mean')}]"
            )
        elif isinstance(value, dict):
            for key, item in value.items():
                walk(item, f"{label}.{key}")
        elif isinstance(value, list):
            for index, item in enumerate(value):
                walk(item, f"{label}.{index}")

    for section, content in dump.data[name].items():
        if section != "is_recompute":
            walk(content, f"{name}.{section}")
    stack = dump.stack.get(name) or []
    return lines, stack if isinstance(stack, list) else [json.dumps(stack)]
