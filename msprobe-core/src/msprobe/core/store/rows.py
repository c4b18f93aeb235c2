"""The rows of the store: one per tensor of a dump, or per name and metric of a monitor CSV.

Columns (besides ``step`` and ``rank``, which the partition folders carry):
``source`` (dump or monitor), ``seq`` (the order calls ran in, in the step: a
module's ``parameters_grad`` rows where its gradients arrive), ``name``
(the dump.json entry name; the monitor's name), ``module`` (the module path:
the module's own for a module entry, its enclosing module's for an API),
``direction`` (forward or backward), ``io`` (input, output, parameters,
parameters_grad; the monitor's kind, e.g. actv or grad_reduced), ``arg``
(the argument's position or keyword; the micro-step for monitor
activations), ``dtype``, ``shape``, ``max``, ``min``, ``mean``, ``norm``,
``md5`` and ``stack_id`` (CRC-32 of the call stack's text: equal stacks
share it across ranks and steps; the ``stacks`` table holds the text).
"""

from __future__ import annotations

import re
import zlib
from pathlib import Path
from typing import Any

import pandas as pd

from msprobe.core.compare.rows import dump_rows
from msprobe.core.diagnosis import call_order
from msprobe.core.dump.entry_names import direction, module_path
from msprobe.core.dump.reader import Dump
from msprobe.core.errors import DataFileError
from msprobe.core.monitor.tensorboard import read_csv_file

COLUMNS = (
    "source",
    "seq",
    "name",
    "module",
    "direction",
    "io",
    "arg",
    "dtype",
    "shape",
    "max",
    "min",
    "mean",
    "norm",
    "md5",
    "stack_id",
)
STATISTICS = ("max", "min", "mean", "norm")


def _float(value: Any) -> float | None:
    if value is None or isinstance(value, bool):
        return None if value is None else float(value)
    try:
        return float(value)
    except (TypeError, ValueError):
        return None


def stack_id(frames: Any) -> int | None:
    if not frames:
        return None
    text = "\n".join(str(frame) for frame in frames) if isinstance(frames, list) else str(frames)
    return zlib.crc32(text.encode("utf-8"))


def dump_columns(dump: Dump, rename: dict[str, str] | None = None) -> tuple[dict[str, list], dict[int, str]]:
    """The store's columns for one step/rank dump, and its stacks (id -> text)."""
    columns: dict[str, list] = {name: [] for name in COLUMNS}
    stacks: dict[int, str] = {}
    enclosing: dict[str, str | None] = {}
    # seq is the order calls ran in (the diagnosis's): a module's parameter gradients where they arrive, not
    # beside its forward entry where dump.json lists them
    position = call_order(dump)
    rows = dump_rows(dump)
    ordered = sorted(range(len(rows)), key=lambda index: (position.get(rows[index].entry, len(position)), index))
    for seq, row in enumerate(rows[index] for index in ordered):
        entry = row.entry
        if entry not in enclosing:
            own = module_path(entry)
            if own is None:
                parent = dump.construct.get(entry)
                own = module_path(parent) if isinstance(parent, str) else None
            enclosing[entry] = own
        suffix = row.name[len(entry) + 1 :] if row.name.startswith(entry + ".") else row.name
        io, _, arg = suffix.partition(".")
        if row.role == "parameters_grad":
            io, arg = "parameters_grad", suffix
        frames = dump.stack.get(entry)
        identity = stack_id(frames)
        if identity is not None and identity not in stacks:
            stacks[identity] = "\n".join(map(str, frames)) if isinstance(frames, list) else str(frames)
        columns["source"].append("dump")
        columns["seq"].append(seq)
        columns["name"].append(_renamed(entry, rename))
        columns["module"].append(_renamed(enclosing[entry], rename))
        columns["direction"].append(direction(entry))
        columns["io"].append(io)
        columns["arg"].append(arg)
        columns["dtype"].append(row.dtype)
        columns["shape"].append([int(size) for size in row.shape] if isinstance(row.shape, list) else None)
        for key, value in zip(STATISTICS, row.stats):
            columns[key].append(_float(value))
        columns["md5"].append(row.md5)
        columns["stack_id"].append(identity)
    return columns, stacks


def _renamed(text: str | None, rename: dict[str, str] | None) -> str | None:
    """data2db's ``--mapping``: each key replaced by its value, in the file's order."""
    if text is None or not rename:
        return text
    for old, new in rename.items():
        text = text.replace(old, new)
    return text


MONITOR_RUN = re.compile(r"(?:^|-)rank(?P<rank>\d+)$")


def monitor_columns(path: Path, kind: str, rename: dict[str, str] | None = None) -> dict[int, dict[str, list]]:
    """The store's columns of one monitor CSV, per step (a CSV holds a range of steps)."""
    table = read_csv_file(path)
    steps = pd.to_numeric(table["step"], errors="coerce")
    if steps.isna().any():
        raise DataFileError(path, f"column 'step': row {int(steps.isna().to_numpy().argmax()) + 2} is not a number")
    by_step: dict[int, dict[str, list]] = {}
    stat_columns = {key: table[key] if key in table.columns else None for key in STATISTICS}
    micro = table["micro_step"] if "micro_step" in table.columns else None
    for position, step in enumerate(steps.astype("int64")):
        columns = by_step.setdefault(int(step), {name: [] for name in COLUMNS})
        columns["source"].append("monitor")
        columns["seq"].append(position)
        columns["name"].append(_renamed(str(table["name"].iat[position]), rename))
        columns["module"].append(None)
        columns["direction"].append("backward" if "grad" in kind else "forward")
        columns["io"].append(kind)
        columns["arg"].append(str(micro.iat[position]) if micro is not None else "")
        columns["dtype"].append(None)
        columns["shape"].append(None)
        for key in STATISTICS:
            series = stat_columns[key]
            columns[key].append(_float(series.iat[position]) if series is not None else None)
        columns["md5"].append(None)
        columns["stack_id"].append(None)
    return by_step
