"""Driving run_ut over a dump: selection, resume, progress, several worker processes.

A framework supplies a runner factory: ``make_runner(dump, device,
save_error_data)`` returning an object with ``forward_names()`` and
``run(name)`` (an outcome with name, forward, backward, message, details
and error_data), plus a ``save_error_data(folder, data)`` function. Both
must be importable by dotted path so worker processes can build them.
"""

from __future__ import annotations

import csv
import importlib
import logging
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from msprobe.core import spreadsheet
from msprobe.core.dump.reader import read_dump
from msprobe.core.files import new_file
from msprobe.core.jobs import Engine, run_jobs
from msprobe.core.precheck.metrics import DETAIL_COLUMNS, RESULT_COLUMNS, SKIP
from msprobe.core.precheck.results import ResultFiles
from msprobe.core.precheck.split import run_split

logger = logging.getLogger(__name__)
RAY_CHUNKS_PER_WORKER = 4  # a lost or slow task costs a quarter of a worker's share


@dataclass
class Outcome:
    """One API's result: what a backend's runner returns for each name."""

    name: str
    forward: str
    backward: str
    message: str
    details: list = field(default_factory=list)
    error_data: dict = field(default_factory=dict)


@dataclass
class RunSummary:
    result_csv: Path
    details_csv: Path
    checked: int
    passed: int
    warnings: int
    errors: int
    skipped: int

    def line(self) -> str:
        verdict = "PASS" if self.errors == 0 else "ERRORS"
        return (
            f"{verdict}: {self.checked} APIs checked: {self.passed} pass, {self.warnings} warning, "
            f"{self.errors} error, {self.skipped} skipped"
        )


def load(path: str) -> Any:
    module, _, attribute = path.partition(":")
    return getattr(importlib.import_module(module), attribute)


def _api_kind(name: str) -> str:
    parts = name.split(".")
    return parts[1] if len(parts) > 1 else name


def select(names: list[str], white_list: list[str], black_list: list[str]) -> list[str]:
    """The reference's rule: black list wins over white list; both name API kinds (relu, conv2d)."""
    chosen = []
    for name in names:
        kind = _api_kind(name)
        if white_list and kind not in white_list:
            continue
        if kind in black_list:
            continue
        chosen.append(name)
    return chosen


def _signature(entry: dict) -> str:
    """What makes two calls the same for -f: the API and its inputs' dtypes and shapes."""
    import json

    def strip(value: Any) -> Any:
        if isinstance(value, dict):
            if "dtype" in value:
                return [value.get("dtype"), value.get("shape")]
            return {k: strip(v) for k, v in value.items() if k not in ("data_name",)}
        if isinstance(value, list):
            return [strip(v) for v in value]
        return value

    return json.dumps([strip(entry.get("input_args")), strip(entry.get("input_kwargs"))], sort_keys=True)


def deduplicate(names: list[str], data: dict) -> list[str]:
    seen: set[tuple[str, str]] = set()
    unique = []
    for name in names:
        key = (".".join(name.split(".")[:2]), _signature(data[name]))
        if key not in seen:
            seen.add(key)
            unique.append(name)
    return unique


def _work(job: tuple[str, str, str, bool, list[str]]) -> list[Any]:
    """A cluster task's share: the outcomes of these APIs (the dump is read by path, from shared storage)."""
    runner_path, dump_path, device, save, names = job
    runner = load(runner_path)(read_dump(dump_path), device, save)
    return [runner.run(name) for name in names]


def run_ut(
    *,
    dump_json: str | Path,
    output_dir: str | Path,
    runner_path: str,
    save_error_path: str,
    devices: list[str],
    processes: int = 1,
    resume_csv: str | Path | None = None,
    save_error_data: bool = False,
    white_list: list[str] | None = None,
    black_list: list[str] | None = None,
    filter_duplicates: bool = False,
    progress: Callable[[int, int], None] | None = None,
    engine: Engine | None = None,
) -> RunSummary:
    """``processes`` > 1: this process and ``processes - 1`` helpers share the APIs (see split.py); with a Ray
    ``engine`` the APIs go to the cluster's workers in chunks instead."""
    dump = read_dump(dump_json)
    runner = load(runner_path)(dump, devices[0], save_error_data)
    names = select(runner.forward_names(), white_list or [], black_list or [])
    if filter_duplicates:
        names = deduplicate(names, dump.data)
    files = ResultFiles(Path(output_dir), Path(resume_csv) if resume_csv else None)
    todo = [name for name in names if name not in files.done]
    error_folder = files.result.parent / f"ut_error_data{time.strftime('%Y%m%d%H%M%S')}"
    saver = load(save_error_path)
    done = len(names) - len(todo)
    if progress:
        progress(done, len(names))

    def record(outcome: Any) -> None:
        nonlocal done
        files.write_api(outcome.name, outcome.forward, outcome.backward, outcome.message, outcome.details)
        if outcome.error_data:
            saver(error_folder, outcome.error_data)
        done += 1
        if progress:
            progress(done, len(names))

    if engine is not None and engine.name == "ray" and todo:
        size = max(1, -(-len(todo) // (RAY_CHUNKS_PER_WORKER * max(processes, 1))))
        jobs = [
            (runner_path, str(dump.path), devices[0], save_error_data, todo[start : start + size])
            for start in range(0, len(todo), size)
        ]
        run_jobs(_work, jobs, engine, "chunks", on_result=lambda _index, outcomes: [record(o) for o in outcomes])
        _reorder(files, names)
    elif processes <= 1 or len(todo) < 2:
        for name in todo:
            record(runner.run(name))
    else:
        run_split(runner, runner_path, str(dump.path), devices, save_error_data, todo, processes - 1, record)
        _reorder(files, names)
    return summarize(files)


def _reorder(files: ResultFiles, order: list[str]) -> None:
    """Workers finish in any order; the files list the APIs as the dump does."""
    from msprobe.core.precheck.results import api_of_detail

    position = {name: index for index, name in enumerate(order)}
    for path, columns, owner in (
        (files.result, RESULT_COLUMNS, lambda name: name),
        (files.details, DETAIL_COLUMNS, api_of_detail),
    ):
        with open(path, encoding="utf-8-sig", newline="") as handle:
            rows = list(csv.reader(handle))[1:]
        rows.sort(
            key=lambda row, owner=owner: position.get(owner(row[0]), len(position))
        )  # stable: keeps each API's order
        with new_file(path, "w", encoding="utf-8-sig", newline="") as handle:
            writer = spreadsheet.writer(handle)
            writer.writerow(columns)
            writer.writerows(rows)


def summarize(files: ResultFiles) -> RunSummary:
    with open(files.result, encoding="utf-8-sig", newline="") as handle:
        rows = list(csv.DictReader(handle))
    counts = {"pass": 0, "warning": 0, "error": 0, SKIP: 0}
    for row in rows:
        statuses = {row["Forward Test Success"], row["Backward Test Success"]}
        if "error" in statuses:
            counts["error"] += 1
        elif "warning" in statuses:
            counts["warning"] += 1
        elif SKIP in statuses:
            counts[SKIP] += 1
        else:
            counts["pass"] += 1
    return RunSummary(
        files.result, files.details, len(rows), counts["pass"], counts["warning"], counts["error"], counts[SKIP]
    )
