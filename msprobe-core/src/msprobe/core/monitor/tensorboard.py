"""TensorBoard event files for the training-state monitor.

Two ways in: ``format: "tensorboard"`` writes scalars while training runs,
and :func:`csv2tensorboard_by_step` converts CSV output afterwards (the
reference's ``csv2tb``). Both use the reference's tag names so dashboards
built on its files keep working. The ``tensorboard`` package is optional
(``pip install msprobe-core[tensorboard]``) and imported only here.
"""

from __future__ import annotations

import logging
import re
import shutil
import time
from concurrent.futures import ProcessPoolExecutor
from contextlib import nullcontext
from datetime import datetime
from pathlib import Path

import pandas as pd

from msprobe.core.errors import DataFileError, UsageError
from msprobe.core.monitor.config import RUN_FOLDER_TIME

logger = logging.getLogger(__name__)

DATA_TYPES = (
    "actv",
    "actv_grad",
    "exp_avg",
    "exp_avg_sq",
    "grad_unreduced",
    "grad_reduced",
    "param",
    "update",
    "ratio",
)
_RUN_FOLDER = re.compile(r"^(?P<time>[A-Z][a-z]{2}\d{2}_\d{2}-\d{2}-\d{2})-rank(?P<rank>\d+)$")
CSV_FILE = re.compile(r"^(?P<kind>[a-z_]+?)_(?P<first>\d+)-(?P<last>\d+)\.csv$")  # {kind}_{first}-{last}.csv
_ID_COLUMNS = ("vpp_stage", "name", "step", "micro_step")


def require_tensorboard() -> None:
    try:
        import tensorboard  # noqa: F401
    except ImportError:
        raise UsageError(
            "TensorBoard output needs the 'tensorboard' package: pip install 'msprobe-core[tensorboard]'"
        ) from None


def monitor_tag(kind: str, name: str, rank: int, op: str, micro_step: int | None = None, vpp_stage: int = 0) -> str:
    """The reference's tag: ``{vpp}:{name}[:{micro_step}]/rank{R}/{kind}_{op}``."""
    where = f"{vpp_stage}:{name}" + (f":{micro_step}" if micro_step is not None else "")
    return f"{where}/rank{rank}/{kind}_{op}"


class ScalarWriter:
    """One TensorBoard event file per folder; scalars are buffered and flushed per step."""

    def __init__(self, folder: str | Path):
        require_tensorboard()
        from tensorboard.compat.proto.event_pb2 import Event
        from tensorboard.compat.proto.summary_pb2 import HistogramProto, Summary
        from tensorboard.summary.writer.event_file_writer import EventFileWriter

        self._writer = EventFileWriter(str(folder))
        self._event, self._summary = Event, Summary  # add() runs once per value: no imports there
        self._histogram = HistogramProto

    def add(self, tag: str, value: float, step: int) -> None:
        summary = self._summary(value=[self._summary.Value(tag=tag, simple_value=float(value))])
        self._writer.add_event(self._event(wall_time=time.time(), step=int(step), summary=summary))

    def add_histogram(self, tag: str, counts: list[float], low: float, high: float, step: int) -> None:
        """Equal-width bins from ``low`` to ``high``: TensorBoard's histogram and distribution dashboards."""
        bins = len(counts)
        width = (high - low) / bins if bins else 0.0
        limits = [low + width * (index + 1) for index in range(bins)]
        centres = [low + width * (index + 0.5) for index in range(bins)]
        histogram = self._histogram(
            min=low,
            max=high,
            num=float(sum(counts)),
            sum=float(sum(c * x for c, x in zip(counts, centres))),
            sum_squares=float(sum(c * x * x for c, x in zip(counts, centres))),
            bucket_limit=limits,
            bucket=[float(c) for c in counts],
        )
        summary = self._summary(value=[self._summary.Value(tag=tag, histo=histogram)])
        self._writer.add_event(self._event(wall_time=time.time(), step=int(step), summary=summary))

    def flush(self) -> None:
        self._writer.flush()

    def close(self) -> None:
        self._writer.close()


def _folder_time(name: str) -> datetime | None:
    match = _RUN_FOLDER.match(name)
    return datetime.strptime(match["time"], RUN_FOLDER_TIME) if match else None


def _parse_time(value: str, argument: str) -> datetime:
    try:
        return datetime.strptime(value, RUN_FOLDER_TIME)
    except ValueError:
        raise UsageError(f"{argument} '{value}' is not a run folder time like 'Dec03_21-34-40'") from None


def read_csv_file(path: Path) -> pd.DataFrame:
    """One monitor CSV, with the columns every reader needs (name, step); a bad file is one error naming it."""
    try:
        table = pd.read_csv(path)
    except (pd.errors.ParserError, pd.errors.EmptyDataError, UnicodeDecodeError, OSError) as exc:
        raise DataFileError(path, f"not a monitor CSV ({exc})") from None
    for column in ("name", "step"):
        if column not in table.columns:
            raise DataFileError(path, f"column '{column}' is missing")
    return table


def convert_csv_file(path: Path, writer: ScalarWriter, rank: int, kind: str) -> int:
    """Write every statistic of one monitor CSV as scalars; returns how many."""
    table = read_csv_file(path)
    ops = [column for column in table.columns if column not in _ID_COLUMNS]
    micro = "micro_step" in table.columns
    written = 0
    for row in table.itertuples(index=False):
        record = row._asdict()
        vpp = int(record.get("vpp_stage", 0) or 0)
        micro_step = int(record["micro_step"]) if micro else None
        for op in ops:
            writer.add(monitor_tag(kind, str(record["name"]), rank, op, micro_step, vpp), record[op], record["step"])
            written += 1
    return written


def _convert_run(job: tuple[Path, Path, tuple[str, ...]]) -> tuple[str, int]:
    source, target, kinds = job
    rank = int(_RUN_FOLDER.match(source.name)["rank"])
    target.mkdir(parents=True, exist_ok=True)
    writer = ScalarWriter(target)
    written = 0
    try:
        for path in sorted(source.glob("*.csv"), key=lambda p: p.name):
            match = CSV_FILE.match(path.name)
            if match and match["kind"] in kinds:
                written += convert_csv_file(path, writer, rank, match["kind"])
    except BaseException:
        writer.close()
        shutil.rmtree(target, ignore_errors=True)  # no half-converted run that looks complete
        raise
    writer.close()
    return source.name, written


def csv2tensorboard_by_step(
    monitor_path: str | Path,
    time_start: str,
    time_end: str,
    process_num: int = 1,
    data_type_list: list[str] | None = None,
    output_dirpath: str | Path | None = None,
) -> Path:
    """Convert the CSV runs whose folder time lies in [time_start, time_end] to TensorBoard files.

    Each run folder ``{time}-rank{R}`` becomes a folder of the same name
    under the output; runs are converted in ``process_num`` processes.
    """
    require_tensorboard()
    root = Path(monitor_path).expanduser()
    if not root.is_dir():
        raise DataFileError(root, "monitor output folder not found")
    start, end = _parse_time(time_start, "time_start"), _parse_time(time_end, "time_end")
    if start > end:
        raise UsageError(f"time_start {time_start} is after time_end {time_end}")
    kinds = tuple(data_type_list or DATA_TYPES)
    unknown = sorted(set(kinds) - set(DATA_TYPES))
    if unknown:
        raise UsageError(f"data_type_list: unknown types {unknown}; choose from {list(DATA_TYPES)}")
    if process_num < 1:
        raise UsageError(f"process_num must be at least 1, not {process_num}")
    runs = sorted(
        folder
        for folder in root.iterdir()
        if folder.is_dir() and (when := _folder_time(folder.name)) is not None and start <= when <= end
    )
    if not runs:
        raise UsageError(f"{root}: no run folders between {time_start} and {time_end}")
    output = Path(output_dirpath or f"{time.strftime('%Y%m%d%H%M%S')}_csv2tensorboard_by_step")
    jobs = [(run, output / run.name, kinds) for run in runs]
    workers = min(process_num, len(jobs))
    with ProcessPoolExecutor(max_workers=workers) if workers > 1 else nullcontext() as pool:
        results = pool.map(_convert_run, jobs) if pool else map(_convert_run, jobs)
        for done, (name, written) in enumerate(results, 1):
            logger.info("csv2tb: %s: %d scalars (%d/%d runs)", name, written, done, len(jobs))
    return output
