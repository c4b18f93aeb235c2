"""The reference's compare table: rows matched, and the table of a block of matched pairs.

The mode follows the dumps: ``tensor`` when both hold tensor files,
``md5`` when both carry CRC-32 values, ``statistics`` otherwise. Rows are
matched by name (``-f`` fuzzy: ignoring call counts, by order of
occurrence), NPU rows keep their order, and bench rows with no NPU partner
are appended with N/A on the NPU side, so nothing is dropped silently.
pipeline.py runs these on blocks of pairs and writes the result files.
"""

from __future__ import annotations

import logging
from collections import defaultdict
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from msprobe.core.backend import Statistics
from msprobe.core.compare.metrics import (
    NA,
    UNSUPPORTED,
    TensorMetrics,
    accuracy_reached,
    pair_metrics,
)
from msprobe.core.compare.rows import Row, c_builder
from msprobe.core.dump.entry_names import parse_entry
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

WARNING_TEXT = "Need double check api accuracy."
NO_BENCH = "No bench data matched."


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
    if any(r.md5 and r.shown_dtype == "" for r in npu_rows) and any(r.md5 and r.shown_dtype == "" for r in bench_rows):
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
            parsed = parse_entry(entry)
            if parsed is None or not parsed.direction:
                key = entry
            else:
                base = parsed.without_count()
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
    bench_calls: dict[str, list[Row]] = defaultdict(list)
    for row in bench_rows:
        bench_calls[row.entry].append(row)
    pairs, unpaired = calls_of_one_structure(pairs, bench_calls)
    pairs.extend((None, bench_by_key[key]) for key in bench_order if key in bench_by_key)
    pairs.extend((None, row) for row in unpaired)
    return pairs


# the reference matches a call only when its inputs, outputs and parameters have the same dtypes and shapes
_LIKE_DTYPES = {frozenset(("float16", "float32")), frozenset(("float16", "bfloat16"))}


def _dtype_key(dtype: Any) -> str:
    """torch.float32, mindspore's Float32 and float32 alike: a MindSpore dump matches its PyTorch twin."""
    text = str(dtype)
    for prefix in ("torch.", "mindspore."):
        text = text.removeprefix(prefix)
    return text.lower()


def _structure(rows: list[Row]) -> list[tuple[str, Any, Any]]:
    return [(row.role, _shown_dtype(row), str(row.shape)) for row in rows]


def _shown_dtype(row: Row) -> Any:
    return row.dtype if row.shown_dtype == "" else row.shown_dtype


def same_structure(npu: list[Row], bench: list[Row]) -> bool:
    if len(npu) != len(bench):
        return False
    if all(
        n.role == b.role and n.dtype == b.dtype and n.shown_dtype == b.shown_dtype and n.shape == b.shape
        for n, b in zip(npu, bench)
    ):
        return True  # the common case, decided without the texts below
    for (role, npu_dtype, npu_shape), (other_role, bench_dtype, bench_shape) in zip(_structure(npu), _structure(bench)):
        if role != other_role or npu_shape != bench_shape:
            return False
        npu_key, bench_key = _dtype_key(npu_dtype), _dtype_key(bench_dtype)
        if npu_key != bench_key and frozenset((npu_key, bench_key)) not in _LIKE_DTYPES:
            return False
    return True


def calls_of_one_structure(
    pairs: list[tuple[Row | None, Row | None]], bench_calls: dict[str, list[Row]]
) -> tuple[list[tuple[Row | None, Row | None]], list[Row]]:
    """Unpair the calls whose two sides differ in structure (a row more or less, another dtype or shape): each
    side's rows then stand alone, as the reference lists them, instead of comparing values of unlike tensors.
    Returns the pairs and the bench rows so set free."""
    result: list[tuple[Row | None, Row | None]] = []
    unpaired: list[Row] = []
    start = 0
    while start < len(pairs):
        entry = pairs[start][0].entry if pairs[start][0] is not None else None
        end = start + 1
        while end < len(pairs) and entry is not None and pairs[end][0] is not None and pairs[end][0].entry == entry:
            end += 1
        group = pairs[start:end]
        bench_entry = next((b.entry for _, b in group if b is not None), None)
        if bench_entry is not None:
            npu = [n for n, _ in group if n is not None]
            bench = bench_calls.get(bench_entry, [])
            if not same_structure(npu, bench):
                result.extend((n, None) for n, _ in group)
                unpaired.extend(b for _, b in group if b is not None)
                start = end
                continue
        result.extend(group)
        start = end
    return result, unpaired


def _stats_matrix(rows: list[Row | None]) -> np.ndarray:
    """The four statistics as floats, NaN where a value is no number (a bool, text, None) or absent."""
    matrix = np.full((len(rows), 4), np.nan)
    for index, row in enumerate(rows):
        if row is not None:
            matrix[index] = [_as_number(v) for v in row.stats]
    return matrix


def _as_number(value: Any) -> float:
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        return float(value)
    return np.nan


def _base_columns(pairs: list[tuple[Row | None, Row | None]]) -> dict[str, list]:
    """Names, dtypes and shapes of both sides; a plain value's dtype is its Python type (text), "None" for None."""
    npu = [n for n, _ in pairs]
    bench = [b for _, b in pairs]
    return {
        "NPU Name": [NA if row is None else row.name for row in npu],
        "Bench Name": [NA if row is None else row.name for row in bench],
        "NPU Dtype": [NA if row is None else str(_shown_dtype(row)) for row in npu],
        "Bench Dtype": [NA if row is None else str(_shown_dtype(row)) for row in bench],
        "NPU Tensor Shape": [NA if row is None else _shape_text(row.shape) for row in npu],
        "Bench Tensor Shape": [NA if row is None else _shape_text(row.shape) for row in bench],
    }


_SHAPE_TEXTS: dict[tuple, str] = {}


def _shape_text(shape: Any) -> str:
    """str(shape), remembered for the few shapes a dump holds many times over."""
    if type(shape) is not list:
        return str(shape)
    key = tuple(shape)
    text = _SHAPE_TEXTS.get(key)
    if text is None:
        text = str(shape)
        if len(_SHAPE_TEXTS) < 100_000:
            _SHAPE_TEXTS[key] = text
    return text


def statistics_table(pairs: list[tuple[Row | None, Row | None]], metrics: Sequence[Any] = ()) -> pd.DataFrame:
    """The reference's statistics-mode table; its metric columns, and any a plugin adds, come from ``metrics``
    (the built-in ones by default). The built-in columns are computed a column at a time; a plugin's metric
    gets each matched row's two summaries."""
    from msprobe.core.compare.builtin_metrics import statistics_columns

    metrics = [m for m in (metrics or default_metrics()) if m.serves("statistics")]
    columns, matched, npu_stats, bench_stats, stat_values = _pair_columns(pairs)
    builtin, warn = statistics_columns(npu_stats, bench_stats)
    every_row = len(matched) == len(pairs)
    cells: dict[str, list[Any]] = {}
    for metric in metrics:
        computed = builtin.get(metric.name) if metric in builtin_statistics_metrics() else None
        if computed is None:
            cell = _MetricColumn(metric)
            computed = [
                cell(Statistics(*npu), Statistics(*bench), pairs[index][0])
                for index, npu, bench in zip(matched, npu_stats, bench_stats)
            ]
        cells[metric.name] = computed if every_row else _spread(computed, matched, len(pairs))
    warned = warn.tolist()
    results = _spread(["Warning" if w else "" for w in warned], matched, len(pairs))
    messages = ["" if bench_row is not None else NO_BENCH for _, bench_row in pairs]
    for index in np.flatnonzero(warn).tolist():
        messages[matched[index]] = WARNING_TEXT
    columns.update({label: [NA] * len(pairs) for label in STATISTICS_METRICS})
    columns.update(cells)
    columns.update(stat_values)
    columns["Result"] = results
    columns["Err_message"] = messages
    # object columns: each cell keeps its type (an int statistic stays an int), whatever the rest of the column
    return pd.DataFrame(columns, columns=with_plugin_columns(STATISTICS_COLUMNS, metrics), dtype=object)


def _pair_columns(
    pairs: list[tuple[Row | None, Row | None]],
) -> tuple[dict[str, list], list[int], list[tuple], list[tuple], dict[str, list]]:
    """The columns taken straight from the rows: names, dtypes, shapes; the pairs with both sides and their
    statistics; the statistics as shown. Built in C where it was compiled (a Python object per cell is the
    cost of a large table)."""
    builder = c_builder()
    if builder is not None and type(pairs) is list:
        built = builder.pair_columns(pairs, NA, _SHAPE_TEXTS)
        if built is not None:
            return (
                dict(zip(BASE_COLUMNS, built[:6])),
                built[6],
                built[7],
                built[8],
                dict(zip(STAT_VALUE_COLUMNS, built[9:])),
            )
    matched = [
        index for index, (npu_row, bench_row) in enumerate(pairs) if npu_row is not None and bench_row is not None
    ]
    npu_stats = [pairs[index][0].stats for index in matched]  # type: ignore[union-attr]
    bench_stats = [pairs[index][1].stats for index in matched]  # type: ignore[union-attr]
    return _base_columns(pairs), matched, npu_stats, bench_stats, _stat_values(pairs)


def _spread(values: list[Any], rows: list[int], count: int) -> list[Any]:
    """``values`` at the positions ``rows`` of a column of ``count`` cells, N/A elsewhere."""
    if len(rows) == count:
        return values
    column: list[Any] = [NA] * count
    for index, value in zip(rows, values):
        column[index] = value
    return column


def _stat_values(pairs: list[tuple[Row | None, Row | None]]) -> dict[str, list[Any]]:
    """The eight columns of both sides' statistics as the table shows them, N/A for a missing side."""
    missing = (NA,) * 4
    npu = [missing if n is None else n.stats for n, _ in pairs]
    bench = [missing if b is None else b.stats for _, b in pairs]
    # a None shows as the text "None"; numbers as numbers, anything else (a bool, text) as it is
    values = [
        ["None" if stats[index] is None else stats[index] for stats in side]
        for side in (npu, bench)
        for index in range(4)
    ]
    return dict(zip(STAT_VALUE_COLUMNS, values))


def builtin_statistics_metrics() -> tuple[Any, ...]:
    from msprobe.core.compare.builtin_metrics import STATISTICS_METRICS as BUILTIN_STATISTICS

    return BUILTIN_STATISTICS


def default_metrics() -> tuple[Any, ...]:
    """The built-in plugin's metrics, for a compare run without the plugin registry (tests, the library)."""
    from msprobe.core.compare.builtin_metrics import BUILTIN_METRICS

    return BUILTIN_METRICS


def with_plugin_columns(reference_columns: list[str], metrics: Sequence[Any]) -> list[str]:
    """The reference's columns in its order, then the columns of metrics it does not have."""
    return [*reference_columns, *(m.name for m in metrics if m.name not in reference_columns)]


def _plugin_of(metric: Any) -> str:
    """ " of plugin 'NAME'" when the plugin registry knows which plugin gave the metric."""
    from msprobe.core.plugins import get_registry

    plugin = get_registry().origin(metric)
    return f" of plugin '{plugin}'" if plugin != "?" else ""


class _MetricColumn:
    """One metric's cells: a metric that raises shows N/A there, with one warning per compare, not per row."""

    def __init__(self, metric: Any):
        self.metric = metric
        self.failed = 0

    def __call__(self, actual: Any, expected: Any, row: Row | None) -> Any:
        try:
            return self.metric.function(actual, expected)
        except Exception as exc:
            if not self.failed:
                logger.warning(
                    "compare metric %s%s failed (first on %s) and shows N/A where it fails: %s",
                    self.metric.name, _plugin_of(self.metric), row.name if row is not None else "?", exc,
                )  # fmt: skip
            self.failed += 1
            return NA


def md5_table(pairs: list[tuple[Row | None, Row | None]]) -> pd.DataFrame:
    columns = _base_columns(pairs)
    # a value with no partner on the other side shows N/A for both CRCs, as the reference's table does
    columns["NPU MD5"] = [(n.md5 or "None") if n and b else NA for n, b in pairs]
    columns["BENCH MD5"] = [(b.md5 or "None") if n and b else NA for n, b in pairs]
    columns["Result"] = [  # the reference's spelling: "pass", "Different"
        NA if n is None or b is None else ("pass" if n.md5 == b.md5 else "Different") for n, b in pairs
    ]
    return pd.DataFrame(columns, columns=MD5_COLUMNS)


TensorLoader = Callable[[Dump, Row], np.ndarray | None]


def tensor_table(
    pairs: list[tuple[Row | None, Row | None]],
    npu: Dump,
    bench: Dump,
    load: TensorLoader,
    metrics: Sequence[Any] = (),
) -> pd.DataFrame:
    """The reference's tensor-mode table; its metric columns, and any a plugin adds, come from ``metrics``
    (the built-in ones by default). Each tensor file is read once per pair, whatever the number of metrics."""
    metrics = [m for m in (metrics or default_metrics()) if m.serves("tensor")]
    columns = _base_columns(pairs)
    cells: dict[str, list[Any]] = {metric.name: [] for metric in metrics}
    cell = {metric.name: _MetricColumn(metric) for metric in metrics}
    accuracy = []
    messages = []
    for npu_row, bench_row in pairs:
        if npu_row is None:  # a bench value no NPU value matched (listed by ours alone)
            for metric in metrics:
                cells[metric.name].append(NA)
            accuracy.append(NA)
            messages.append("")
            continue
        if bench_row is None:  # the reference's cells for an NPU value with no partner
            for metric in metrics:
                cells[metric.name].append(UNSUPPORTED if metric.name in TENSOR_METRICS else NA)
            accuracy.append(accuracy_reached(TensorMetrics(*(UNSUPPORTED,) * 5)))
            messages.append(NO_BENCH)
            continue
        arrays, unreadable = _pair_arrays(npu_row, bench_row, npu, bench, load)
        if arrays is None:  # the reference's "unsupported" in its columns, with its words; N/A in a plugin's
            for metric in metrics:
                cells[metric.name].append(UNSUPPORTED if metric.name in TENSOR_METRICS else NA)
            accuracy.append(accuracy_reached(unreadable))
            messages.append(unreadable.message)
            continue
        for metric in metrics:
            cells[metric.name].append(cell[metric.name](*arrays, npu_row))
        verdict = pair_metrics(*arrays)
        accuracy.append(accuracy_reached(verdict))
        messages.append(verdict.message)
    pair_metrics.forget()
    columns.update({label: [NA] * len(pairs) for label in TENSOR_METRICS})
    columns.update(cells)
    columns.update(_stat_values(pairs))
    columns["Accuracy Reached or Not"] = accuracy
    columns["Err_message"] = messages
    table = pd.DataFrame(columns, columns=with_plugin_columns(TENSOR_COLUMNS, metrics))
    # the reference names no file for a value with no partner: nothing was compared with it
    data_names = [NA if n is None else (n.data_name or "-1") if b is not None else "-1" for n, b in pairs]
    table.insert(len(TENSOR_COLUMNS), DATA_NAME_COLUMN, data_names)
    return table


def _pair_arrays(
    npu_row: Row, bench_row: Row, npu: Dump, bench: Dump, load: TensorLoader
) -> tuple[tuple[np.ndarray, np.ndarray] | None, TensorMetrics]:
    """A matched pair's two tensors; what has no file to read gets the reference's "unsupported" and its words."""
    unsupported = (UNSUPPORTED,) * 5
    if not npu_row.data_name:  # a value with no file (a scalar, a None)
        return None, TensorMetrics(*unsupported, NO_BENCH)  # the reference's words, though the value was matched
    if not bench_row.data_name:
        return None, TensorMetrics(*unsupported, "Bench does not have data file.")
    actual = load(npu, npu_row)
    if actual is None:
        return None, TensorMetrics(*unsupported, f"Dump file: {npu_row.data_name} not found.")
    expected = load(bench, bench_row)
    if expected is None:
        return None, TensorMetrics(*unsupported, f"Dump file: {bench_row.data_name} not found.")
    return (actual, expected), TensorMetrics()


def finish_table(
    mode: str, table: pd.DataFrame, pairs: list[tuple[Row | None, Row | None]], stack_of: Dump | None
) -> dict[int, str]:
    """The stack column (from ``stack_of``'s stacks, when given) and the highlighting rules' messages, added to
    a table of whole calls; returns the rows to colour."""
    if stack_of is not None:
        stack_cells = _stack_cells(stack_of.stack, pairs)
        if DATA_NAME_COLUMN in table.columns:  # the reference's order: the stacks, then the file names
            table.insert(table.columns.get_loc(DATA_NAME_COLUMN), STACK_COLUMN, stack_cells)
        else:
            table[STACK_COLUMN] = stack_cells
    from msprobe.core.compare.highlight import highlight_rows

    highlights = highlight_rows(mode, table, pairs)
    if highlights.messages:
        table["Err_message"] = _with_messages(table["Err_message"].tolist(), highlights.messages)
    return highlights.marks


def _with_messages(current: list[str], messages: dict[int, list[str]]) -> list[str]:
    """The highlighting rules' messages after what the row already says, a line each, as the reference."""
    for index, found in messages.items():
        current[index] = "\n".join([current[index], *found] if current[index] else found)
    return current


def _stack_cells(stacks: dict[str, Any], pairs: list[tuple[Row | None, Row | None]]) -> list[str]:
    """NPU_Stack_Info as the reference writes it: the call's frames (Python's text of the list) on its first
    row, when that row is an input or the call has no partner, and "None" on every other row (and for a call
    stack.json does not hold: a backward)."""
    cells = []
    previous = None
    for npu_row, bench_row in pairs:
        if npu_row is None:  # a bench value listed by ours alone
            cells.append(NA)
            continue
        first, previous = npu_row.entry != previous, npu_row.entry
        frames = stacks.get(npu_row.entry) if first and (bench_row is None or npu_row.role == "input") else None
        cells.append("None" if frames is None else str(frames))
    return cells


def tensor_loader(readers: dict[str, Callable[[Path], np.ndarray]]) -> TensorLoader:
    """Load a row's tensor file with the reader for its suffix; None when missing or unreadable."""
    cache: dict[Path, np.ndarray | None] = {}

    def load(dump: Dump, row: Row) -> np.ndarray | None:
        path = dump.tensor_file(row.data_name, row.entry)
        if path is None:
            return None
        if path in cache:
            return cache[path]
        reader = readers.get(path.suffix)
        value = None
        if reader is not None:
            try:
                value = reader(path)
            except Exception as exc:
                logger.warning("cannot read %s: %s", path, exc)
        if len(cache) > 64:
            cache.clear()
        cache[path] = value
        return value

    return load
