"""Flatten a dump into one row per compared value, in call order.

Row names follow the reference: ``{entry}.input.0``, ``{entry}.output.0``,
``{entry}.input.alpha`` for keyword arguments, ``{entry}.parameters.weight``
and ``{module}.parameters_grad.weight``. Scalars (int/float/bool) get rows
too; strings, None and other objects do not.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

from msprobe.core.dump.reader import Dump

STAT_KEYS = ("Max", "Min", "Mean", "Norm")


@dataclass
class Row:
    name: str
    entry: str  # the dump.json entry this value belongs to
    dtype: str
    shape: list
    stats: tuple  # Max, Min, Mean, Norm (None where absent)
    md5: str | None
    data_name: str | None
    role: str  # "input", "output", "parameters" ... (drives highlighting)


def _number(value: Any) -> Any:
    if isinstance(value, str):
        try:
            return float(value)  # "inf", "nan" as the writers store them
        except ValueError:
            return None
    return value


def _leaves(value: Any, name: str) -> Iterator[tuple[str, dict]]:
    if isinstance(value, dict):
        if "type" in value and ("dtype" in value or "value" in value):
            yield name, value
            return
        for key, item in value.items():
            yield from _leaves(item, f"{name}.{key}")
    elif isinstance(value, list):
        for index, item in enumerate(value):
            yield from _leaves(item, f"{name}.{index}")


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


SECTIONS = (
    ("input_args", "input"),
    ("input_kwargs", "input"),
    ("input", "input"),
    ("output", "output"),
    ("parameters", "parameters"),
)


def dump_rows(dump: Dump) -> list[Row]:
    rows: list[Row] = []
    for entry, content in dump.data.items():
        if not isinstance(content, dict):
            continue
        if entry.endswith(".parameters_grad"):
            for leaf_name, leaf in _leaves(content, entry):
                row = _row(_strip_single_index(leaf_name), entry, leaf, "parameters_grad")
                if row is not None:
                    rows.append(row)
            continue
        for section, role in SECTIONS:
            if section not in content:
                continue
            label = "input" if section.startswith("input") else section
            for leaf_name, leaf in _leaves(content[section], f"{entry}.{label}"):
                row = _row(leaf_name, entry, leaf, role)
                if row is not None:
                    rows.append(row)
    return rows


def _strip_single_index(name: str) -> str:
    """``X.parameters_grad.weight.0`` -> ``X.parameters_grad.weight`` (each gradient sits in a one-item list)."""
    return name[:-2] if name.endswith(".0") else name
