"""The monitor's files: CSV (the reference's names and header) or TensorBoard, and the anomaly file."""

from __future__ import annotations

import json
import logging
import os
import time
from collections import defaultdict
from concurrent.futures import Future, ThreadPoolExecutor
from pathlib import Path
from typing import Any

import numpy as np

from msprobe.core import spreadsheet
from msprobe.core.files import make_dir, new_file, open_new_file
from msprobe.core.monitor.config import OUTPUT_ENV, RUN_FOLDER_TIME, MonitorConfig

logger = logging.getLogger(__name__)


def _resumed_folder(root: Path, rank: int, append_output: list[str]) -> Path | None:
    """``append_output: [start, end]``: this rank's run folder whose time lies in the range, to write on into."""
    if not append_output:
        return None
    start, end = (time.strptime(value, RUN_FOLDER_TIME) for value in append_output)  # checked by MonitorConfig
    if not root.is_dir():
        return None
    for folder in sorted(root.iterdir()):
        stamp, _, folder_rank = folder.name.rpartition("-rank")
        if folder.is_dir() and folder_rank == str(rank):
            try:
                when = time.strptime(stamp, RUN_FOLDER_TIME)
            except ValueError:
                continue
            if start <= when <= end:
                return folder
    return None


def _write_csv_files(files: list[tuple[Path, list[str], list[list[Any]]]]) -> None:
    """Each file written beside its name and renamed: a reader never sees half a file."""
    for path, header, rows in files:
        with new_file(path, "w", newline="") as handle:
            writer = spreadsheet.writer(handle)
            writer.writerow(header)
            writer.writerows(rows)


class MonitorOutput:
    """CSV or TensorBoard files under MONITOR_OUTPUT_DIR/{timestamp}-rank{R}/, and the anomaly file."""

    def __init__(self, config: MonitorConfig, rank: int):
        self.config = config
        root = Path(os.environ.get(OUTPUT_ENV, "./monitor_output"))
        existing = _resumed_folder(root, rank, config.append_output)
        self.folder = existing or make_dir(root / f"{time.strftime(RUN_FOLDER_TIME)}-rank{rank}")
        self.rank = rank
        self.pending: dict[str, list[list[Any]]] = defaultdict(list)
        self.first_step: int | None = None
        self.anomalies = self.folder / "anomalies.jsonl"
        self.first_anomaly_step: int | None = None
        self.scalars = None
        self._writer: ThreadPoolExecutor | None = None
        self._writes: list[Future] = []
        self.reconfigure(config)

    def reconfigure(self, config: MonitorConfig) -> None:
        """Follow a new config (dynamic mode): the writer matches its format."""
        self.config = config
        if config.format == "tensorboard" and self.scalars is None:
            from msprobe.core.monitor.tensorboard import ScalarWriter, monitor_tag

            self.scalars, self._tag = ScalarWriter(self.folder), monitor_tag
        elif config.format != "tensorboard":
            self._close_scalars()

    def add_table(self, labels: list[tuple[str, str, int | None]], values: np.ndarray, step: int) -> None:
        """One step's statistics: ``labels[i] = (kind, name, micro_step)``, ``values[i]`` one per op."""
        if self.first_step is None:
            self.first_step = step
        ops = self.config.ops
        if self.scalars is not None:
            for (kind, name, micro_step), row in zip(labels, values.tolist()):
                for op, value in zip(ops, row):
                    self.scalars.add(self._tag(kind, name, self.rank, op, micro_step), value, step)
            return
        with np.errstate(invalid="ignore"):
            rounded = np.where(np.isfinite(values), np.round(values, self.config.ndigits), values).tolist()
        pending = self.pending
        for (kind, name, micro_step), row in zip(labels, rounded):
            if micro_step is None:
                pending[kind].append([0, name, step, *row])
            else:
                pending[kind].append([0, name, step, micro_step, *row])

    def add_histogram(self, kind: str, name: str, step: int, counts: list[float], low: float, high: float) -> None:
        """A value distribution (TensorBoard only; CSV keeps the statistics)."""
        if self.scalars is not None and counts:
            tag = self._tag(kind, name, self.rank, "histogram")
            self.scalars.add_histogram(tag, counts, low, high, step)

    def end_step(self, step: int, records: int) -> None:
        if self.scalars is not None:
            self.scalars.flush()
        if self.config.format != "csv":
            self.pending.clear()
            return
        if records % self.config.step_count_per_record and self.pending:
            return  # more steps go into the same file
        self.flush(step)

    def flush(self, last_step: int) -> None:
        """Hand the pending rows to the writer thread: the training thread does no file I/O."""
        files = []
        for kind, rows in self.pending.items():
            micro = kind.startswith("actv")
            header = ["vpp_stage", "name", "step", *(["micro_step"] if micro else []), *self.config.ops]
            files.append((self.folder / f"{kind}_{self.first_step}-{last_step}.csv", header, rows))
        self.pending = defaultdict(list)
        self.first_step = None
        if files:
            if self._writer is None:
                self._writer = ThreadPoolExecutor(max_workers=1, thread_name_prefix="msprobe-monitor-csv")
            self._writes = [future for future in self._writes if not future.done() or self._report(future)]
            self._writes.append(self._writer.submit(_write_csv_files, files))

    @staticmethod
    def _report(future: Future) -> bool:
        if future.exception() is not None:
            logger.warning("monitor: CSV not written: %s", future.exception())
        return False

    def wait(self) -> None:
        """Until every CSV handed to the writer thread is on disk."""
        for future in self._writes:
            self._report(future)
        self._writes = []

    def close(self) -> None:
        self.wait()
        if self._writer is not None:
            self._writer.shutdown(wait=True)
            self._writer = None
        self._close_scalars()

    def _close_scalars(self) -> None:
        if self.scalars is not None:
            self.scalars.close()
            self.scalars = None

    def anomaly(self, step: int, kind: str, name: str, reason: str) -> None:
        if self.first_anomaly_step is None:
            self.first_anomaly_step = step
            logger.warning(
                "monitor: first anomaly at step %d on rank %d: %s %s: %s", step, self.rank, kind, name, reason
            )
        with open_new_file(self.anomalies, "a") as handle:
            handle.write(
                json.dumps({"step": step, "rank": self.rank, "kind": kind, "name": name, "reason": reason}) + "\n"
            )
