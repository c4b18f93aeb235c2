"""Training-state monitor, the framework-neutral half: config, schedule, CSV files, anomaly rules.

A framework measures the tensors of a step and hands the core one table of
``(kind, name, micro_step, {op: value})`` rows per step; this module decides
which steps are collected, writes ``{kind}_{start}-{end}.csv`` files (the
reference's names and header: ``vpp_stage, name, step[, micro_step], *ops``)
and applies the anomaly rules.
"""

from __future__ import annotations

import json
import logging
import math
import os
import time
from collections import defaultdict
from concurrent.futures import Future, ThreadPoolExecutor
from pathlib import Path
from typing import Any, Literal

import numpy as np
from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

from msprobe.core import spreadsheet
from msprobe.core.config import config_error_from_validation, read_config_file
from msprobe.core.dump.writer import make_dir, open_new_file, write_new_file
from msprobe.core.errors import ConfigError, MsprobeError, UsageError

logger = logging.getLogger(__name__)

OPS = ("min", "max", "norm", "mean", "zeros", "nans", "std", "amax", "dynamic_range")
OUTPUT_ENV = "MONITOR_OUTPUT_DIR"


class AlertRule(BaseModel):
    model_config = ConfigDict(extra="forbid")
    rule_name: Literal["AnomalyTurbulence"]
    args: dict[str, float] = Field(default_factory=lambda: {"threshold": 0.5})


class Alert(BaseModel):
    model_config = ConfigDict(extra="forbid")
    rules: list[AlertRule] = Field(default_factory=list)
    dump: bool = False


class MonitorConfig(BaseModel):
    """The reference's monitor config; unknown keys are errors, as for config.json."""

    model_config = ConfigDict(extra="forbid")
    targets: dict[str, Any] = Field(default_factory=dict)
    xy_distribution: bool = False
    all_xy: bool = False
    forward_only: bool = False
    backward_only: bool = False
    wg_distribution: bool = False
    mv_distribution: bool = False
    param_distribution: bool = False
    ur_distribution: bool = False
    cc_distribution: dict[str, Any] = Field(default_factory=dict)
    ops: list[str] = Field(default_factory=lambda: ["min", "max", "norm", "nans"])
    eps: float = 1e-8
    ndigits: int = Field(default=6, ge=0, le=17)
    format: Literal["csv", "tensorboard", "api"] = "csv"
    step_count_per_record: int = Field(default=1, ge=1)
    start_step: int = Field(default=0, ge=0)
    step_interval: int = Field(default=1, ge=1)
    collect_times: int = Field(default=10**8, ge=1)
    alert: Alert = Field(default_factory=Alert)
    print_struct: bool = False
    module_ranks: list[int] = Field(default_factory=list)
    squash_name: bool = True
    dynamic_on: bool = False
    append_output: list[str] = Field(default_factory=list)

    @field_validator("append_output")
    @classmethod
    def _two_run_times(cls, times: list[str]) -> list[str]:
        if times and len(times) != 2:
            raise ValueError("needs two run-folder times (start, end), e.g. ['Dec03_21-34-40', 'Dec03_21-34-41']")
        for value in times:
            try:
                time.strptime(value, RUN_FOLDER_TIME)
            except ValueError:
                raise ValueError(f"'{value}' is not a run-folder time like 'Dec03_21-34-40'") from None
        return times

    @field_validator("ops")
    @classmethod
    def _known_ops(cls, ops: list[str]) -> list[str]:
        unknown = [op for op in ops if op not in OPS]
        if unknown:
            raise ValueError(f"unknown op(s) {unknown}; known: {', '.join(OPS)}")
        if not ops:
            raise ValueError("must name at least one op")
        return ops


def load_monitor_config(path: str | Path) -> MonitorConfig:
    raw = read_config_file(path)
    try:
        config = MonitorConfig.model_validate(raw)
    except ValidationError as exc:
        raise config_error_from_validation(exc, path) from None
    if config.format == "tensorboard":
        from msprobe.core.monitor_tensorboard import require_tensorboard

        try:
            require_tensorboard()
        except UsageError as exc:
            raise ConfigError(str(exc), path=path, field="format") from None
    return config


class Schedule:
    """start_step, step_interval, collect_times: which steps are collected."""

    def __init__(self, config: MonitorConfig, start_iteration: int = 0):
        self.config = config
        self.step = start_iteration
        self.collected = 0

    def collecting(self) -> bool:
        config = self.config
        if self.step < config.start_step or self.collected >= config.collect_times:
            return False
        return (self.step - config.start_step) % config.step_interval == 0


class AnomalyDetector:
    """AnomalyTurbulence: a value more than ``threshold`` (relative) away from its running mean; inf/nan always."""

    def __init__(self, alert: Alert):
        self.thresholds = [rule.args.get("threshold", 0.5) for rule in alert.rules]
        self.history: dict[tuple[str, str, str], tuple[float, int]] = {}

    def check(self, kind: str, name: str, op: str, value: float) -> str | None:
        if not math.isfinite(value) or (op == "nans" and value > 0):
            return f"{op} is {value}"
        if not self.thresholds:  # no rule: only non-finite values count, no history to keep
            return None
        key = (kind, name, op)
        mean, count = self.history.get(key, (0.0, 0))
        reason = None
        if count and self.thresholds and op not in ("nans", "zeros"):
            threshold = min(self.thresholds)
            if abs(value - mean) > threshold * abs(mean) and abs(mean) > 0:
                reason = f"{op} {value:.6g} is more than {threshold} away from its mean {mean:.6g}"
        self.history[key] = ((mean * count + value) / (count + 1), count + 1)
        return reason


RUN_FOLDER_TIME = "%b%d_%H-%M-%S"  # run folders are named {time}-rank{R}


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
        partial = path.with_name(f".{path.name}.partial")
        with open_new_file(partial, newline="") as handle:
            writer = spreadsheet.writer(handle)
            writer.writerow(header)
            writer.writerows(rows)
        os.chmod(partial, 0o640)
        os.replace(partial, path)


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
            from msprobe.core.monitor_tensorboard import ScalarWriter, monitor_tag

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


DYNAMIC_ENV = "DYNAMIC_MONITOR"


class DynamicSwitch:
    """Dynamic start/stop: with DYNAMIC_MONITOR=True, editing the config turns collection on and off.

    Collection starts when ``dynamic_on`` is true (the first time), or when the
    config file is newer than last seen and ``dynamic_on`` is true; after
    ``collect_times`` collected steps it stops and writes ``dynamic_on: false``
    back, so the next edit can start it again.
    """

    def __init__(self, path: str | Path):
        self.path = Path(path)
        self.enabled = os.environ.get(DYNAMIC_ENV, "").lower() == "true"
        self.seen_mtime = 0.0
        self.started_once = False

    def poll(self) -> MonitorConfig | None:
        """A config to (re)start collection with, or None."""
        if not self.enabled:
            return None
        try:
            mtime = self.path.stat().st_mtime
        except OSError:
            return None
        if self.started_once and mtime <= self.seen_mtime:
            return None
        self.seen_mtime = mtime
        try:
            config = load_monitor_config(self.path)
        except MsprobeError as exc:  # a bad edit must not stop the training; the next save is read again
            logger.warning("monitor: %s; keeping the current settings", exc)
            return None
        if not config.dynamic_on:
            return None
        self.started_once = True
        return config

    def switch_off(self) -> None:
        raw = read_config_file(self.path)
        raw["dynamic_on"] = False
        text = json.dumps(raw, indent=4).encode()
        write_new_file(self.path, lambda handle: handle.write(text))
        self.seen_mtime = self.path.stat().st_mtime


class MonitorSession:
    """What every framework's TrainerMon shares: schedule, dynamic switch, output, anomalies, getters.

    The framework measures tensors into rows ``(kind, name, micro_step,
    values)`` and calls :meth:`end_step` once per training step.
    """

    def __init__(self, config_path: str | Path):
        self.config = load_monitor_config(config_path)
        self.dynamic = DynamicSwitch(config_path)
        self.active = not self.dynamic.enabled  # dynamic mode waits for dynamic_on
        self.detector = AnomalyDetector(self.config.alert)
        self.schedule: Schedule | None = None
        self.output: MonitorOutput | None = None
        self._latest: tuple[list[tuple[str, str, int | None]], np.ndarray, list[str]] | None = None
        self._metrics: dict[str, dict[str, dict[str, float]]] | None = None
        self.on_anomaly: Any = None  # called with (step, kind, name) when alert.dump is set
        self._forward_calls: dict[str, int] = defaultdict(int)
        self.grad_acc_steps = 1
        self.local_gradients: dict[str, Any] = {}  # weight -> local gradient summed over micro-batches
        self._failed: set[str] = set()
        if self.config.forward_only and self.config.backward_only:
            logger.warning("monitor: forward_only and backward_only are both true: no activations are collected")

    @property
    def forward_activations(self) -> bool:
        return self.config.xy_distribution and not self.config.backward_only

    @property
    def activation_gradients(self) -> bool:
        return self.config.xy_distribution and not self.config.forward_only

    def _add(self, kind: str, name: str, micro_step: int | None, tensor: Any) -> None:
        """Queue the statistics of one framework tensor; each backend computes them on its device."""
        raise NotImplementedError

    def _is_float_tensor(self, value: Any) -> bool:
        """Whether an activation is a floating-point framework tensor worth measuring."""
        raise NotImplementedError

    def _tracks_gradient(self, value: Any) -> bool:
        """Whether backward will reach this tensor, so a gradient hook on it fires."""
        return True

    def _activation_hook(self, name: str) -> Any:
        """A module/cell forward hook: forward statistics now, gradient statistics when backward reaches them.

        Tensor hooks rather than module backward hooks: they leave the
        autograd graph as it is, so in-place operations in the model keep working.
        """

        def hook(_module: Any, args: tuple, output: Any) -> None:
            if not self.collecting():
                return
            try:
                micro_step = self.next_micro_step(name)
                for label, raw in (("input", args[0] if args else None), ("output", output)):
                    value = raw[0] if isinstance(raw, (tuple, list)) and raw else raw
                    if not self._is_float_tensor(value):
                        continue
                    if self.forward_activations:
                        self._add("actv", f"{name}.{label}", micro_step, value)
                    if self.activation_gradients and self._tracks_gradient(value):
                        value.register_hook(self._gradient_hook(f"{name}.{label}_grad", micro_step))
            except Exception as exc:  # never break training
                self._warn_once(name, exc)

        return hook

    def _gradient_hook(self, name: str, micro_step: int) -> Any:
        """A tensor hook recording the gradient that reaches an activation (``actv_grad``)."""

        def hook(grad: Any) -> None:
            try:
                self._add("actv_grad", name, micro_step, grad)
            except Exception as exc:  # never break training
                self._warn_once(name, exc)

        return hook

    def _accumulate(self, total: Any, grad: Any) -> Any:
        """``total + grad`` for a framework tensor (in place where the framework allows)."""
        raise NotImplementedError

    def _clone(self, grad: Any) -> Any:
        raise NotImplementedError

    def _local_gradient_hook(self, name: str) -> Any:
        """A weight's gradient as one backward produces it: before data-parallel reduction and accumulation.

        Registered only when several ranks train. A tensor hook on the
        weight runs before the gradient is accumulated or reduced. With one
        micro-batch per step the statistics are taken at once; with several,
        the local sum is kept until the optimizer step (one gradient copy, on
        collected steps only).
        """

        def hook(grad: Any) -> None:
            if not self.collecting():
                return
            try:
                if self.grad_acc_steps == 1:
                    self._add("grad_unreduced", name, None, grad)
                elif name in self.local_gradients:
                    self.local_gradients[name] = self._accumulate(self.local_gradients[name], grad)
                else:
                    self.local_gradients[name] = self._clone(grad)
            except Exception as exc:  # never break training
                self._warn_once(name, exc)

        return hook

    def _warn_once(self, name: str, exc: Exception) -> None:
        if name not in self._failed:
            self._failed.add(name)
            logger.warning("monitor: %s not recorded (%s: %s)", name, type(exc).__name__, exc)

    def next_micro_step(self, module: str) -> int:
        """The micro-batch a module's forward call belongs to: its call count within the step."""
        count = self._forward_calls[module]
        self._forward_calls[module] = count + 1
        return count

    def start(self, rank: int, start_iteration: int = 0) -> None:
        self.rank = rank
        self.schedule = Schedule(self.config, start_iteration)
        self.output = MonitorOutput(self.config, rank)
        if self.config.cc_distribution.get("enable"):
            logger.warning("monitor: cc_distribution (communication monitoring) is not supported; ignored")
        self.poll_dynamic()

    def watches_module(self, name: str) -> bool:
        """Whether activations of the module/cell ``name`` are collected (a target or inside one)."""
        if self.config.module_ranks and getattr(self, "rank", 0) not in self.config.module_ranks:
            return False
        targets = self.config.targets
        return self.config.all_xy or not targets or any(name == t or name.startswith(f"{t}.") for t in targets)

    def watches_weight(self, name: str) -> bool:
        """Whether the weight ``name`` is watched: no targets, or it lies under one."""
        targets = self.config.targets
        return not targets or any(name.startswith(target) for target in targets)

    def print_structure(self, names: list[str]) -> None:
        """``print_struct``: the module/cell names that can go into ``targets``, printed once."""
        if self.config.print_struct:
            print("msprobe monitor: module names for 'targets':\n" + "\n".join(f"  {name}" for name in names))

    def collecting(self) -> bool:
        return self.schedule is not None and self.active and self.schedule.collecting()

    def poll_dynamic(self) -> None:
        """Dynamic start/stop: follow the config file between steps."""
        if not self.dynamic.enabled or self.schedule is None:
            return
        if self.active and self.schedule.collected >= self.config.collect_times:
            self.active = False
            self.dynamic.switch_off()
            logger.warning("monitor: collected %d steps; dynamic_on switched off", self.schedule.collected)
            return
        config = self.dynamic.poll()
        if config is not None:
            self.config = config
            self.schedule = Schedule(config.model_copy(update={"start_step": self.schedule.step}), self.schedule.step)
            if self.output.pending:
                self.output.flush(max(self.schedule.step - 1, 0))
            self.output.reconfigure(config)
            self.active = True

    def end_step(self, rows: list[tuple[str, str, int | None, list[float]]]) -> None:
        """One step's rows ``(kind, name, micro_step, values)``; see :meth:`end_step_table`."""
        labels = [(kind, name, micro_step) for kind, name, micro_step, _ in rows]
        values = np.array([row for *_, row in rows], dtype=np.float64).reshape(len(rows), len(self.config.ops))
        self.end_step_table(labels, values)

    def end_step_table(self, labels: list[tuple[str, str, int | None]], values: np.ndarray) -> None:
        """Record one step: ``values`` holds one row per label and one column per op (whole-table work only)."""
        step = self.schedule.step
        self._forward_calls.clear()
        if labels:
            self._latest, self._metrics = (labels, values, list(self.config.ops)), None
            self.output.add_table(labels, values, step)
            self._check_anomalies(labels, values, step)
            self.schedule.collected += 1
            self.output.end_step(step, self.schedule.collected)
        self.schedule.step += 1

    def _check_anomalies(self, labels: list[tuple[str, str, int | None]], values: np.ndarray, step: int) -> None:
        ops = self.config.ops
        if self.detector.thresholds:
            rows = range(len(labels))  # every value feeds its running mean
        else:
            bad = ~np.isfinite(values).all(axis=1)
            if "nans" in ops:
                bad |= values[:, ops.index("nans")] > 0
            rows = np.flatnonzero(bad).tolist()
        for index in rows:
            kind, name, _micro_step = labels[index]
            for op, value in zip(ops, values[index].tolist()):
                reason = self.detector.check(kind, name, op, value)
                if reason is not None:
                    self.output.anomaly(step, kind, name, reason)
                    if self.config.alert.dump and self.on_anomaly is not None:
                        self.on_anomaly(step, kind, name)

    @property
    def metrics(self) -> dict[str, dict[str, dict[str, float]]]:
        """The last collected step as ``{kind: {name: {op: value}}}``, built when a getter asks."""
        if self._metrics is None:
            self._metrics = {}
            if self._latest is not None:
                labels, values, ops = self._latest
                for (kind, name, _micro_step), row in zip(labels, values.tolist()):
                    self._metrics.setdefault(kind, {})[name] = dict(zip(ops, row))
        return self._metrics

    def finish(self) -> None:
        if self.output is not None:
            if self.output.pending:
                self.output.flush(max(self.schedule.step - 1, 0))
            self.output.close()

    # the reference's getters for format "api"
    def generate_wgrad_metrics(self) -> tuple[dict[str, dict[str, float]], dict[str, dict[str, float]]]:
        """(reduced, unreduced) weight-gradient statistics; unreduced is collected by the PyTorch backend."""
        return self.metrics.get("grad_reduced", {}), self.metrics.get("grad_unreduced", {})

    def generate_xy_metrics(self) -> tuple[dict[str, dict[str, float]], dict[str, dict[str, float]]]:
        """(actv, actv_grad): activation statistics and those of their gradients."""
        return self.metrics.get("actv", {}), self.metrics.get("actv_grad", {})

    def generate_mv_metrics(self) -> dict[str, dict[str, dict[str, float]]]:
        return {key: self.metrics.get(key, {}) for key in ("exp_avg", "exp_avg_sq")}

    def generate_param_metrics(self) -> dict[str, dict[str, float]]:
        return self.metrics.get("param", {})
