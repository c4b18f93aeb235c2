"""Flatten a dump into one row per compared value, in call order.

Row names follow the reference: ``{entry}.input.0``, ``{entry}.output.0``,
``{entry}.input.alpha`` for keyword arguments, ``{entry}.parameters.weight``
and ``{module}.parameters_grad.weight``. The graph takes rows for tensors
and scalars (int/float/bool); the compare table (``every_value``) takes one
for every value the reference lists: None, strings, slices, sizes and other
objects too, shown as the reference shows them.
"""

from __future__ import annotations

import re
import zlib
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

from msprobe.core.dump.reader import Dump
from msprobe.core.errors import DataFileError
from msprobe.core.switches import built_extension

STAT_KEYS = ("Max", "Min", "Mean", "Norm")


@dataclass(slots=True)
class Row:
    name: str
    entry: str  # the dump.json entry this value belongs to
    dtype: str
    shape: list
    stats: tuple  # Max, Min, Mean, Norm (None where absent)
    md5: str | None
    data_name: str | None
    role: str  # "input", "output", "parameters" ... (drives highlighting)
    shown_dtype: str | None = ""  # the compare table's dtype text where it is not ``dtype`` (plain values)


def _number(value: Any) -> Any:
    if isinstance(value, str):
        try:
            return float(value)  # "inf", "nan" as the writers store them
        except ValueError:
            return None
    return value


def _leaves(value: Any, name: str, every_value: bool = False, depth: int = 0) -> Iterator[tuple[str, dict | None]]:
    """The values under ``value`` with their row names; ``every_value``: as the reference's compare parses them
    (any dict with a text ``type`` is a value, and a None stands for one)."""
    if depth > 64:  # a dump nested this deep is malformed; its deeper values get no rows
        return
    if isinstance(value, dict):
        if every_value and isinstance(value.get("type"), str):
            yield name, value
            return
        if not every_value and "type" in value and ("dtype" in value or "value" in value):
            yield name, value
            return
        for key, item in value.items():
            yield from _leaves(item, f"{name}.{key}", every_value, depth + 1)
    elif isinstance(value, list):
        for index, item in enumerate(value):
            yield from _leaves(item, f"{name}.{index}", every_value, depth + 1)
    elif value is None and every_value:
        yield name, None


def _row(name: str, entry: str, leaf: dict, role: str) -> Row | None:
    kind = leaf.get("type", "")
    if "dtype" in leaf:
        stats = tuple(_number(leaf.get(key)) for key in STAT_KEYS)
        return Row(
            name,
            entry,
            str(leaf.get("dtype")),
            list(leaf.get("shape") or []),
            stats,
            leaf.get("md5"),
            leaf.get("data_name"),
            role,
        )
    if kind in ("int", "float", "bool") and isinstance(leaf.get("value"), (int, float, bool, str)):
        value = _number(leaf["value"])
        value = float(value) if value is not None else None
        return Row(name, entry, kind, [], (value, value, value, value), None, None, role)
    return None


def _plain_row(name: str, entry: str, leaf: dict | None, role: str) -> Row:
    """A value that is not a tensor, as the reference's compare lists it: its Python type as the dtype, the
    value itself four times as the statistics, the CRC-32 of its text as the md5."""
    if leaf is None:
        return Row(name, entry, "None", None, (None,) * 4, None, None, role, shown_dtype=None)
    kind, value = leaf.get("type"), leaf.get("value")
    stats: tuple = (None,) * 4
    if kind == "torch.Size":
        shown, shape = kind, str(value)
    elif kind == "slice":
        shown, shape = kind, str(_slice_shape(value))
    elif kind in ("ellipsis", "torch.ProcessGroup"):
        shown, shape = kind, "[]"
        stats = (value if kind == "ellipsis" else str(leaf.get("group_ranks")),) * 4
    else:
        shown, shape = f"<class '{_python_type(value)}'>", "[]"
        stats = (value,) * 4
    md5 = leaf.get("md5") or f"{zlib.crc32(_python_text(value).encode()):08x}"
    return Row(name, entry, str(kind), shape, stats, md5, leaf.get("data_name"), role, shown_dtype=shown)


def _slice_shape(value: Any) -> tuple[int, ...]:
    """numpy's shape of the slice's [start, stop, step] list, as the reference reports it."""
    return (len(value),) if isinstance(value, list) else ()


_JSON_TYPES = {bool: "bool", int: "int", float: "float", str: "str", type(None): "NoneType", list: "list", dict: "dict"}


def _python_type(value: Any) -> str:
    return _JSON_TYPES.get(type(value), type(value).__name__)


def _python_text(value: Any) -> str:
    """str() of the value as Python shows it (True, None, 2.0), whose CRC the reference takes."""
    return "" if value is None else str(value)


SECTIONS = (
    ("input_args", "input"),
    ("input_kwargs", "input"),
    ("input", "input"),
    ("output", "output"),
    ("parameters", "parameters"),
)
# the compare table lists a module's parameters between its inputs and outputs, as the reference does
TABLE_SECTIONS = (*SECTIONS[:3], SECTIONS[4], SECTIONS[3])


_SECTION_TYPES = {"input_args": list, "input_kwargs": dict, "input": list, "output": list, "parameters": dict}
_STAT_TYPES = (int, float, str, type(None))
_FLOAT_MAX = 1.7976931348623157e308  # bool is an int; "inf"/"nan" text in older dumps


def _check_section(dump: Dump, entry: str, section: str, value: Any) -> None:
    expected = _SECTION_TYPES[section]
    if not isinstance(value, expected):
        found = "null" if value is None else type(value).__name__
        message = f"entry '{entry}', field '{section}': expected a {expected.__name__}, found {found}"
        raise DataFileError(dump.path, message)


def _check_tensor(dump: Dump, name: str, leaf: dict) -> None:
    """A tensor summary the table can be built from: a list of sizes, numbers (or null) as statistics."""
    shape = leaf.get("shape")
    if shape is not None and not (isinstance(shape, list) and all(type(n) is int and n >= 0 for n in shape)):
        raise DataFileError(dump.path, f"value '{name}', field 'shape': expected a list of sizes, found {shape!r}")
    for key in STAT_KEYS:
        value = leaf.get(key)
        if not isinstance(value, _STAT_TYPES) or (type(value) is int and abs(value) > _FLOAT_MAX):
            shown = repr(value) if len(repr(value)) < 40 else repr(value)[:40] + "..."
            raise DataFileError(dump.path, f"value '{name}', field '{key}': expected a number, found {shown}")


def dump_rows(dump: Dump, every_value: bool = False) -> list[Row]:
    """One row per value in call order; ``every_value``: also the values that are not tensors or scalars.

    A value that breaks the dump.json schema (a section of the wrong kind, a shape that is no list of sizes,
    a statistic that is no number) is an error naming the file, the entry or value, and the field.
    """
    rows: list[Row] = []

    def add(name: str, entry: str, leaf: dict | None, role: str) -> None:
        if leaf is not None and "dtype" in leaf:
            _check_tensor(dump, name, leaf)
        row = _row(name, entry, leaf, role) if leaf is not None and (not every_value or "dtype" in leaf) else None
        if row is None and every_value:
            row = _plain_row(name, entry, leaf, role)
        if row is not None:
            rows.append(row)

    def entry_rows(entry: str, content: Any) -> None:
        if not isinstance(content, dict):
            return
        if entry.endswith(".parameters_grad"):
            for leaf_name, leaf in _leaves(content, entry, every_value):
                add(_strip_single_index(leaf_name), entry, leaf, "parameters_grad")
            return
        for section, role in TABLE_SECTIONS if every_value else SECTIONS:
            if section not in content:
                continue
            value = content[section]
            _check_section(dump, entry, section, value)
            label = "input" if section.startswith("input") else section
            if not every_value:
                for leaf_name, leaf in _leaves(value, f"{entry}.{label}", every_value):
                    add(leaf_name, entry, leaf, role)
                continue
            prefix = f"{entry}.{label}"
            for key, item in enumerate(value) if type(value) is list else value.items():
                name = f"{prefix}.{key}"
                row = _plain_tensor_row(name, entry, item, role)
                if row is not None:
                    rows.append(row)
                    continue
                for leaf_name, leaf in _leaves(item, name, every_value, 1):
                    add(leaf_name, entry, leaf, role)

    if every_value and c_rows is not None and type(dump.data) is dict:
        # the C builder makes the rows of entries that hold only tensor summaries, and gives the rest here
        c_rows.table_rows(dump.data, rows, entry_rows)
    else:
        for entry, content in dump.data.items():
            entry_rows(entry, content)
    return named_after_files(rows)


def named_after_files(rows: list[Row]) -> list[Row]:
    """A value with a tensor file is named after the file, less its suffix, as the reference's compare names
    it: a keyword tensor's row is ``X.forward.kwargs.weight`` in a tensor dump, ``X.forward.input.weight`` in
    a dump of statistics (no files). A data_name that is no plain file name keeps the row its place's name:
    reading its file is refused later, naming the entry."""
    for row in rows:
        data_name = row.data_name
        if data_name and type(data_name) is str and data_name != "-1" and not _PATH_PARTS.search(data_name):
            row.name = data_name.rsplit(".", 1)[0]
    return rows


_PATH_PARTS = re.compile(r"[/\\]|^\.\.?$")


def _plain_tensor_row(name: str, entry: str, leaf: Any, role: str) -> Row | None:
    """The row of the commonest value, a tensor summary with four float statistics and a valid shape, built
    without the general path's checks (they would all pass); None for anything else."""
    if type(leaf) is not dict or "dtype" not in leaf or type(leaf.get("type")) is not str:
        return None
    shape, stats = leaf.get("shape"), (leaf.get("Max"), leaf.get("Min"), leaf.get("Mean"), leaf.get("Norm"))
    if type(shape) is not list or [n for n in shape if type(n) is not int or n < 0]:
        return None
    if type(stats[0]) is not float or type(stats[1]) is not float or type(stats[2]) is not float:
        return None
    if type(stats[3]) is not float:
        return None
    return Row(name, entry, str(leaf["dtype"]), shape, stats, leaf.get("md5"), leaf.get("data_name"), role)


try:  # optional: built where a C compiler was found (setup.py)
    from msprobe.core.compare import _tablerows as c_rows
except ImportError:
    c_rows = None  # type: ignore[assignment]
c_rows = built_extension(c_rows, 1, "msprobe.core.compare._tablerows")
if c_rows is not None:
    c_rows.configure(Row)


def c_builder() -> Any | None:
    """The C row builder (``_tablerows``), or None for the Python path. ``c_rows`` is the one switch (tests set
    it to None); the compare's modules ask here at each use."""
    return c_rows


def _strip_single_index(name: str) -> str:
    """``X.parameters_grad.weight.0`` -> ``X.parameters_grad.weight`` (each gradient sits in a one-item list)."""
    return name[:-2] if name.endswith(".0") else name
