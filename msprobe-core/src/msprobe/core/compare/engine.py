"""Compare two dumps into the reference's result table.

The mode follows the dumps: ``tensor`` when both hold tensor files,
``md5`` when both carry CRC-32 values, ``statistics`` otherwise. Rows are
matched by name (``-f`` fuzzy: ignoring call counts, by order of
occurrence), NPU rows keep their order, and bench rows with no NPU partner
are appended with N/A on the NPU side, so nothing is dropped silently.
"""

from __future__ import annotations

import logging
import re
from collections import defaultdict
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from msprobe.core.compare.metrics import NA, accuracy_reached, tensor_metrics
from msprobe.core.compare.rows import Row, dump_rows
from msprobe.core.dump.reader import Dump

logger = logging.getLogger(__name__)

BASE_COLUMNS = ["NPU Name", "Bench Name", "NPU Dtype", "Bench Dtype", "NPU Tensor Shape", "Bench Tensor Shape"]
STAT_VALUE_COLUMNS = [
    "NPU max",
    "NPU min",
    "NPU mean",
    "NPU l2norm",
    "Bench max",
    "Bench min",
    "Bench mean",
    "Bench l2norm",
]
STATISTICS_METRICS = [
    "Max diff",
    "Min diff",
    "Mean diff",
    "L2norm diff",
    "MaxRelativeErr",
    "MinRelativeErr",
    "MeanRelativeErr",
    "NormRelativeErr",
]
TENSOR_METRICS = ["Cosine", "MaxAbsErr", "MaxRelativeErr", "One Thousandth Err Ratio", "Five Thousandths Err Ratio"]
STATISTICS_COLUMNS = [
    *BASE_COLUMNS,
    *STATISTICS_METRICS,
    *STAT_VALUE_COLUMNS,
    "Result",
    "Err_message",
]
TENSOR_COLUMNS = [
    *BASE_COLUMNS,
    *TENSOR_METRICS,
    *STAT_VALUE_COLUMNS,
    "Accuracy Reached or Not",
    "Err_message",
]
MD5_COLUMNS = [*BASE_COLUMNS, "NPU MD5", "BENCH MD5", "Result"]
STACK_COLUMN = "NPU_Stack_Info"
DATA_NAME_COLUMN = "Data_name"

_COUNT = re.compile(r"^(?P<head>(?:[^.]+\.)+?[^.]+)\.(?P<count>\d+)\.(?P<dir>forward|backward)$")
_MODULE_COUNT = re.compile(r"^(?P<head>Module\..+\.(?:forward|backward))\.(?P<count>\d+)$")


@dataclass
class CompareResult:
    mode: str
    table: pd.DataFrame
    highlight: dict[int, str]  # row index -> "red" | "yellow"
    npu: Dump
    bench: Dump


def detect_mode(npu_rows: list[Row], bench_rows: list[Row], npu: Dump, bench: Dump) -> str:
    if npu.task == "tensor" and bench.task == "tensor":
        return "tensor"
    if any(r.md5 for r in npu_rows) and any(r.md5 for r in bench_rows):
        return "md5"
    return "statistics"


def _keyed(rows: list[Row], fuzzy: bool, translate: Callable[[str], str] | None = None) -> list[tuple[str, Row]]:
    """Row keys: the (translated) row name; with -f the call count is replaced by the occurrence."""
    occurrence: dict[str, int] = defaultdict(int)
    entry_keys: dict[str, str] = {}
    keyed = []
    for row in rows:
        name = translate(row.name) if translate is not None else row.name
        if not fuzzy:
            keyed.append((name, row))
            continue
        entry = translate(row.entry) if translate is not None else row.entry
        if not name.startswith(entry):
            keyed.append((name, row))  # an exact data mapping: no fuzzy part
            continue
        key = entry_keys.get(row.entry)
        if key is None:
            match = _COUNT.match(entry) or _MODULE_COUNT.match(entry)
            if match is None:
                key = entry
            else:
                base = match["head"] + ("." + match["dir"] if "dir" in match.groupdict() else "")
                key = f"{base}#{occurrence[base]}"
                occurrence[base] += 1
            entry_keys[row.entry] = key
        keyed.append((key + name[len(entry) :], row))
    return keyed


def match_rows(
    npu_rows: list[Row], bench_rows: list[Row], fuzzy: bool = False, mapping: Callable[[str], str] | None = None
) -> list[tuple[Row | None, Row | None]]:
    bench_by_key: dict[str, Row] = {}
    bench_order: list[str] = []
    for key, row in _keyed(bench_rows, fuzzy):
        if key not in bench_by_key:
            bench_by_key[key] = row
            bench_order.append(key)
    pairs: list[tuple[Row | None, Row | None]] = []
    for key, row in _keyed(npu_rows, fuzzy, mapping):
        pairs.append((row, bench_by_key.pop(key, None)))
    pairs.extend((None, bench_by_key[key]) for key in bench_order if key in bench_by_key)
    return pairs


def _stats_matrix(rows: list[Row | None]) -> np.ndarray:
    matrix = np.full((len(rows), 4), np.nan)
    for index, row in enumerate(rows):
        if row is not None:
            matrix[index] = [np.nan if v is None else float(v) for v in row.stats]
    return matrix


def _percent(diff: np.ndarray, bench: np.ndarray) -> list[Any]:
    with np.errstate(divide="ignore", invalid="ignore"):
        relative = np.abs(diff / bench) * 100
    return [NA if not np.isfinite(value) else f"{value}%" for value in relative]


def _base_columns(pairs: list[tuple[Row | None, Row | None]]) -> dict[str, list]:
    def pick(row: Row | None, attribute: str) -> Any:
        if row is None:
            return NA
        value = getattr(row, attribute)
        return str(value) if attribute == "shape" else value

    return {
        "NPU Name": [pick(n, "name") for n, _ in pairs],
        "Bench Name": [pick(b, "name") for _, b in pairs],
        "NPU Dtype": [pick(n, "dtype") for n, _ in pairs],
        "Bench Dtype": [pick(b, "dtype") for _, b in pairs],
        "NPU Tensor Shape": [pick(n, "shape") for n, _ in pairs],
        "Bench Tensor Shape": [pick(b, "shape") for _, b in pairs],
    }


def _values(matrix: np.ndarray) -> list[list[Any]]:
    return [[NA if np.isnan(v) else float(v) for v in column] for column in matrix.T]


def statistics_table(pairs: list[tuple[Row | None, Row | None]]) -> pd.DataFrame:
    npu = _stats_matrix([n for n, _ in pairs])
    bench = _stats_matrix([b for _, b in pairs])
    diff = npu - bench
    columns = _base_columns(pairs)
    for label, index in (("Max diff", 0), ("Min diff", 1), ("Mean diff", 2), ("L2norm diff", 3)):
        columns[label] = [NA if np.isnan(v) else float(v) for v in diff[:, index]]
    for label, index in (("MaxRelativeErr", 0), ("MinRelativeErr", 1), ("MeanRelativeErr", 2), ("NormRelativeErr", 3)):
        columns[label] = _percent(diff[:, index], bench[:, index])
    for label, values in zip(STAT_VALUE_COLUMNS, _values(npu) + _values(bench)):
        columns[label] = values
    with np.errstate(divide="ignore", invalid="ignore"):
        relative = np.abs(diff / bench)
    warn = np.nanmax(np.where(np.isfinite(relative), relative, np.nan), axis=1, initial=0) > 0.5
    unmatched = [n is None or b is None for n, b in pairs]
    columns["Result"] = [NA if u else ("Warning" if w else "") for u, w in zip(unmatched, warn)]
    columns["Err_message"] = ["" if u or not w else "Need double check api accuracy." for u, w in zip(unmatched, warn)]
    return pd.DataFrame(columns, columns=STATISTICS_COLUMNS)


def md5_table(pairs: list[tuple[Row | None, Row | None]]) -> pd.DataFrame:
    columns = _base_columns(pairs)
    columns["NPU MD5"] = [n.md5 if n and n.md5 else NA for n, _ in pairs]
    columns["BENCH MD5"] = [b.md5 if b and b.md5 else NA for _, b in pairs]
    columns["Result"] = [
        NA if n is None or b is None or not n.md5 or not b.md5 else ("Pass" if n.md5 == b.md5 else "Different")
        for n, b in pairs
    ]
    return pd.DataFrame(columns, columns=MD5_COLUMNS)


TensorLoader = Callable[[Dump, Row], np.ndarray | None]


def tensor_table(
    pairs: list[tuple[Row | None, Row | None]], npu: Dump, bench: Dump, load: TensorLoader
) -> pd.DataFrame:
    columns = _base_columns(pairs)
    stats = statistics_table(pairs)
    metric_rows = []
    accuracy = []
    messages = []
    for npu_row, bench_row in pairs:
        message_prefix = ""
        actual = expected = None
        if npu_row is not None and npu_row.data_name:
            actual = load(npu, npu_row)
            if actual is None:
                message_prefix = f"Dump file: {npu_row.data_name} not found."
        if bench_row is not None and bench_row.data_name:
            expected = load(bench, bench_row)
        if npu_row is None or bench_row is None:
            metric_rows.append((NA, NA, NA, NA, NA))
            accuracy.append(NA)
            messages.append("" if npu_row is None else "No bench data matched.")
            continue
        if actual is None and npu_row.data_name is None:  # a scalar: statistics carry its value
            actual = np.array(npu_row.stats[0]) if npu_row.stats[0] is not None else None
            expected = np.array(bench_row.stats[0]) if bench_row.stats[0] is not None else None
        metrics = tensor_metrics(actual, expected)
        if npu_row.dtype != bench_row.dtype and not metrics.message:
            metrics.message = "Dtype of NPU and bench Tensor do not match."
        metric_rows.append(
            (
                metrics.cosine,
                metrics.max_abs_err,
                metrics.max_relative_err,
                metrics.one_thousandth,
                metrics.five_thousandths,
            )
        )
        accuracy.append(accuracy_reached(metrics) if not message_prefix else "None")
        messages.append(" ".join(part for part in (message_prefix, metrics.message) if part))
    for index, label in enumerate(TENSOR_METRICS):
        columns[label] = [row[index] for row in metric_rows]
    for label in STAT_VALUE_COLUMNS:
        columns[label] = stats[label].tolist()
    columns["Accuracy Reached or Not"] = accuracy
    columns["Err_message"] = messages
    table = pd.DataFrame(columns, columns=TENSOR_COLUMNS)
    table[DATA_NAME_COLUMN] = [n.data_name if n is not None and n.data_name else NA for n, _ in pairs]
    return table


def compare_dumps(
    npu: Dump,
    bench: Dump,
    fuzzy: bool = False,
    stack: bool = False,
    load: TensorLoader | None = None,
    mapping: Callable[[str], str] | None = None,
    extra_metrics: tuple = (),
) -> CompareResult:
    npu_rows, bench_rows = dump_rows(npu), dump_rows(bench)
    pairs = match_rows(npu_rows, bench_rows, fuzzy=fuzzy, mapping=mapping)
    mode = detect_mode(npu_rows, bench_rows, npu, bench)
    if mode == "tensor" and load is not None:
        table = tensor_table(pairs, npu, bench, load)
        for metric in extra_metrics:
            table[metric.name] = _extra_metric(metric, pairs, npu, bench, load)
    elif mode == "md5":
        table = md5_table(pairs)
    else:
        mode = "statistics"
        table = statistics_table(pairs)
    if stack:
        table[STACK_COLUMN] = [_stack_text(npu, n) for n, _ in pairs]
    from msprobe.core.compare.highlight import highlight_rows

    return CompareResult(mode, table, highlight_rows(mode, table, pairs), npu, bench)


def _extra_metric(metric: Any, pairs: list, npu: Dump, bench: Dump, load: TensorLoader) -> list[Any]:
    values = []
    for npu_row, bench_row in pairs:
        if npu_row is None or bench_row is None or not npu_row.data_name or not bench_row.data_name:
            values.append(NA)
            continue
        actual, expected = load(npu, npu_row), load(bench, bench_row)
        try:
            values.append(NA if actual is None or expected is None else metric.function(actual, expected))
        except Exception as exc:  # a plugin metric must not stop the compare
            logger.warning("compare metric %s failed on %s: %s", metric.name, npu_row.name, exc)
            values.append(NA)
    return values


def _stack_text(dump: Dump, row: Row | None) -> str:
    if row is None:
        return NA
    frames = dump.stack.get(row.entry)
    if not frames:
        return NA
    return "\n".join(frames) if isinstance(frames, list) else str(frames)


def tensor_loader(readers: dict[str, Callable[[Path], np.ndarray]]) -> TensorLoader:
    """Load a row's tensor file with the reader for its suffix; None when missing or unreadable."""
    cache: dict[Path, np.ndarray | None] = {}

    def load(dump: Dump, row: Row) -> np.ndarray | None:
        folder = dump.tensor_dir()
        if folder is None or not row.data_name:
            return None
        path = folder / row.data_name
        if path in cache:
            return cache[path]
        reader = readers.get(path.suffix)
        value = None
        if reader is not None and path.exists():
            try:
                value = reader(path)
            except Exception as exc:
                logger.warning("cannot read %s: %s", path, exc)
        if len(cache) > 64:
            cache.clear()
        cache[path] = value
        return value

    return load
