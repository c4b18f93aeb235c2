"""One monitored training run: the schedule, the measurements a framework hands over, the files."""

from __future__ import annotations

import logging
from collections import defaultdict
from pathlib import Path
from typing import Any

import numpy as np

from msprobe.core.monitor.anomaly import AnomalyDetector
from msprobe.core.monitor.config import load_monitor_config
from msprobe.core.monitor.output import MonitorOutput
from msprobe.core.monitor.schedule import Schedule
from msprobe.core.monitor.switch import DynamicSwitch

logger = logging.getLogger(__name__)


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
