"""TrainerMon for PyTorch: statistics of weights, gradients, optimizer state and activations, all run long.

Statistics are computed on the device as small tensors during the step and
brought to the host once, at the optimizer step that ends it (one
``tolist()`` for everything), never per tensor. The core decides which steps
are collected, writes the CSV files and applies the anomaly rules.
"""

from __future__ import annotations

import logging
from typing import Any

import numpy as np
import torch

from msprobe.core.monitor import MonitorSession
from msprobe.pytorch.modules import hookable_modules, warn_unhooked
from msprobe.pytorch.tensor_io import save_pt

logger = logging.getLogger(__name__)


def _stats(tensor: torch.Tensor, ops: list[str], eps: float) -> torch.Tensor:
    """All requested statistics of one tensor as one small device tensor (no host transfer here)."""
    data = tensor.detach()
    data = data.float() if data.dtype not in (torch.float32, torch.float64) else data
    if data.numel() == 0:
        return torch.full((len(ops),), float("nan"), device=data.device, dtype=torch.float64)
    computed: dict[str, torch.Tensor] = {}
    if "min" in ops or "max" in ops:
        computed["min"], computed["max"] = torch.aminmax(data)
    if "norm" in ops:
        computed["norm"] = torch.linalg.vector_norm(data)
    if "mean" in ops:
        computed["mean"] = data.mean()
    if "std" in ops:
        computed["std"] = data.std() if data.numel() > 1 else torch.zeros((), device=data.device, dtype=data.dtype)
    if {"zeros", "amax", "dynamic_range"} & set(ops):
        absolute = data.abs()
        computed["zeros"] = (absolute < eps).to(data.dtype).mean()
        computed["amax"] = absolute.max()
        if "dynamic_range" in ops:
            nonzero = absolute[absolute > 0]
            smallest = nonzero.min() if nonzero.numel() else torch.ones((), device=data.device, dtype=data.dtype)
            computed["dynamic_range"] = torch.log2(computed["amax"].clamp_min(1e-45) / smallest)
    if "nans" in ops:
        computed["nans"] = torch.isnan(data).sum().to(data.dtype)
    return torch.stack([computed[op] for op in ops]).to(torch.float64)


_BATCHED_OPS = frozenset({"min", "max", "norm"})


def _stats_batch(tensors: list[torch.Tensor], ops: list[str], eps: float) -> torch.Tensor:
    """Statistics of many tensors with a few multi-tensor kernels instead of several per tensor.

    Used at the optimizer step, where a model's weights, gradients and
    optimizer state are read at once; per-tensor launches dominate there.
    Falls back to :func:`_stats` for other ops, dtypes or mixed devices.
    Returns one row per tensor, one column per op.
    """
    batchable = (
        tensors
        and set(ops) <= _BATCHED_OPS
        and len({(t.device, t.dtype) for t in tensors}) == 1
        and tensors[0].dtype in (torch.float32, torch.float64)
        and all(t.numel() for t in tensors)
    )
    if not tensors:
        return torch.empty((0, len(ops)), dtype=torch.float64)
    if not batchable:
        return torch.stack([_stats(tensor, ops, eps) for tensor in tensors])
    data = [tensor.detach() for tensor in tensors]
    columns: dict[str, torch.Tensor] = {}
    if "norm" in ops:
        columns["norm"] = torch.stack(torch._foreach_norm(data))
    if "min" in ops or "max" in ops:
        # one pass per tensor for both; -max(-x) for the minimum would copy every tensor first
        lowest, highest = zip(*(torch.aminmax(tensor) for tensor in data))
        columns["min"], columns["max"] = torch.stack(lowest), torch.stack(highest)
    return torch.stack([columns[op] for op in ops], dim=1).to(torch.float64)


HISTOGRAM_BINS = 30


def _first_in_group(group: Any) -> bool:
    """Is this rank the group's first? No group: every rank keeps its own."""
    if group is None:
        return True
    ranks = torch.distributed.get_process_group_ranks(group)
    return not ranks or torch.distributed.get_rank() == min(ranks)


class TrainerMon(MonitorSession):
    """The reference's entry point: ``TrainerMon(config_file_path).set_monitor(model, ...)``."""

    def __init__(self, config_file_path: str, process_group: Any = None, params_have_main_grad: bool = True):
        super().__init__(config_file_path)
        self.params_have_main_grad = params_have_main_grad
        # statistics waiting for the host: (labels, one row per label), read back once per step
        self.pending: list[tuple[list[tuple[str, str, int | None]], torch.Tensor]] = []
        self.handles: list[Any] = []
        self.data_parallel = False
        self.model: Any = None
        self.optimizer: Any = None
        self.on_anomaly = self._dump_gradient
        self.dp_first = True  # this rank keeps the reduced gradients of its data-parallel group
        self.tp_first = True  # this rank keeps the gradients that tensor parallelism replicates
        self.histograms: list[tuple[str, str, torch.Tensor, torch.Tensor]] = []
        self._watched: tuple[tuple[str, ...], list[tuple[str, torch.nn.Parameter]]] | None = None

    # -- setup -----------------------------------------------------------------------------
    def set_monitor(
        self,
        model: Any,
        grad_acc_steps: int = 1,
        optimizer: Any = None,
        dp_group: Any = None,
        tp_group: Any = None,
        start_iteration: int = 0,
    ) -> TrainerMon:
        from torch.optim.optimizer import register_optimizer_step_post_hook, register_optimizer_step_pre_hook

        models = list(model) if isinstance(model, (list, tuple)) else [model]
        self.model, self.optimizer = models, optimizer
        self.grad_acc_steps = max(1, grad_acc_steps)
        distributed = torch.distributed.is_available() and torch.distributed.is_initialized()
        self.start(torch.distributed.get_rank() if distributed else 0, start_iteration)
        self.print_structure(
            [f"{i}:{n}" if len(models) > 1 else n for i, m in enumerate(models) for n, _ in m.named_modules() if n]
        )
        if self.forward_activations or self.activation_gradients:
            scripted: list[str] = []
            for index, root in enumerate(models):
                modules, left_out = hookable_modules(root)
                scripted += [f"{index}:{name}" if len(models) > 1 else name for name in left_out]
                for name, module in modules:
                    if name and self.watches_module(name):
                        label = f"{index}:{name}" if len(models) > 1 else name
                        self.handles.append(module.register_forward_hook(self._activation_hook(label)))
            warn_unhooked(scripted, "monitored")
        self.data_parallel = distributed and torch.distributed.get_world_size() > 1
        if distributed:
            self.dp_first = _first_in_group(dp_group)
            self.tp_first = _first_in_group(tp_group)
        if self.config.wg_distribution and self.data_parallel:
            for name, parameter in self._parameters():
                if parameter.requires_grad:
                    self.handles.append(parameter.register_hook(self._local_gradient_hook(name)))
        self.handles.append(register_optimizer_step_pre_hook(self._before_optimizer))
        self.handles.append(register_optimizer_step_post_hook(self._after_optimizer))
        return self

    def _parameters(self) -> list[tuple[str, torch.nn.Parameter]]:
        """The watched weights, found once per targets (a dynamic config may change them)."""
        targets = tuple(self.config.targets)
        if self._watched is None or self._watched[0] != targets:
            found = []
            for root in self.model:
                for name, parameter in root.named_parameters():
                    if self.watches_weight(name):
                        found.append((name, parameter))
            self._watched = (targets, found)
        return self._watched[1]

    # -- collection ---------------------------------------------------------------------------
    def _is_float_tensor(self, value: Any) -> bool:
        return isinstance(value, torch.Tensor) and value.is_floating_point()

    def _tracks_gradient(self, value: Any) -> bool:
        return value.requires_grad

    def _accumulate(self, total: torch.Tensor, grad: torch.Tensor) -> torch.Tensor:
        return total.add_(grad)

    def _clone(self, grad: torch.Tensor) -> torch.Tensor:
        return grad.detach().clone()

    def _add(self, kind: str, name: str, micro_step: int | None, tensor: torch.Tensor) -> None:
        self.pending.append(([(kind, name, micro_step)], _stats(tensor, self.config.ops, self.config.eps)[None]))

    def _gradient(self, parameter: torch.nn.Parameter) -> torch.Tensor | None:
        if self.params_have_main_grad and getattr(parameter, "main_grad", None) is not None:
            return parameter.main_grad
        return parameter.grad

    def _before_optimizer(self, optimizer: Any, args: tuple, kwargs: dict) -> None:
        if self.optimizer is not None and optimizer is not self.optimizer:
            return
        self.poll_dynamic()
        local_gradients, self.local_gradients = self.local_gradients, {}
        if not self.collecting():
            return
        requests: list[tuple[str, str, torch.Tensor]] = [
            ("grad_unreduced", name, local) for name, local in local_gradients.items()
        ]
        for name, parameter in self._parameters():
            grad = self._gradient(parameter)
            if self.config.wg_distribution and grad is not None and self._keeps_reduced(parameter):
                requests.append(("grad_reduced", name, grad))
            if self.config.param_distribution:
                requests.append(("param", name, parameter))
            if self.config.mv_distribution:
                state = optimizer.state.get(parameter, {})
                for key in ("exp_avg", "exp_avg_sq"):
                    if isinstance(state.get(key), torch.Tensor):
                        requests.append((key, name, state[key]))
        if not requests:
            return
        statistics = _stats_batch([tensor for *_, tensor in requests], self.config.ops, self.config.eps)
        self.pending.append(([(kind, name, None) for kind, name, _ in requests], statistics))
        if self.config.wg_distribution and not self.data_parallel:  # one process: local == reduced
            reduced = [index for index, (kind, _, _) in enumerate(requests) if kind == "grad_reduced"]
            labels = [("grad_unreduced", requests[index][1], None) for index in reduced]
            self.pending.append((labels, statistics[reduced]))

    def _after_optimizer(self, optimizer: Any, args: tuple, kwargs: dict) -> None:
        if self.optimizer is not None and optimizer is not self.optimizer:
            return
        labels: list[tuple[str, str, int | None]] = []
        values = np.empty((0, len(self.config.ops)))
        try:
            if self.config.ur_distribution and self.collecting():
                self._collect_update_ratio(optimizer)
            if self.pending:
                labels = [label for chunk, _ in self.pending for label in chunk]
                values = torch.cat([stats.cpu() for _, stats in self.pending]).numpy()  # one host transfer
            self._write_histograms()
        except Exception as exc:  # never break training
            logger.warning("monitor: step %d not recorded (%s: %s)", self.schedule.step, type(exc).__name__, exc)
            labels = []
        self.pending.clear()
        self.histograms.clear()
        self.end_step_table(labels, values)

    def _keeps_reduced(self, parameter: torch.nn.Parameter) -> bool:
        """After reduction the data-parallel group holds one gradient, and tensor parallelism copies some."""
        if not self.dp_first:
            return False
        return self.tp_first or bool(getattr(parameter, "tensor_model_parallel", False))

    def _collect_update_ratio(self, optimizer: Any) -> None:
        """Adam's step direction after bias correction: update = m/(sqrt(v)+eps), ratio = m/sqrt(v)."""
        names = {id(parameter): name for name, parameter in self._parameters()}
        updates: list[tuple[str, str, torch.Tensor]] = []
        for group in optimizer.param_groups:
            betas, eps = group.get("betas"), group.get("eps", 1e-8)
            for parameter in group["params"]:
                name = names.get(id(parameter))
                state = optimizer.state.get(parameter, {})
                if name is None or "exp_avg" not in state or "exp_avg_sq" not in state:
                    continue
                if not betas or "step" not in state:
                    self._warn_once("ur_distribution", ValueError("needs an Adam-family optimizer (betas, step)"))
                    return
                step = float(state["step"])
                with torch.no_grad():
                    moment = state["exp_avg"] / (1 - betas[0] ** step)
                    root = (state["exp_avg_sq"] / (1 - betas[1] ** step)).sqrt()
                    updates.append(("update", name, moment / (root + eps)))
                    updates.append(("ratio", name, moment / root))
        if not updates:
            self._warn_once("ur_distribution", ValueError("the optimizer keeps no exp_avg/exp_avg_sq state"))
            return
        statistics = _stats_batch([tensor for *_, tensor in updates], self.config.ops, self.config.eps)
        self.pending.append(([(kind, name, None) for kind, name, _ in updates], statistics))
        for kind, name, tensor in updates:
            if self.output is not None and self.output.scalars is not None:
                finite = tensor[torch.isfinite(tensor)].float()
                if finite.numel():
                    bounds = torch.stack(torch.aminmax(finite))
                    self.histograms.append((kind, name, torch.histc(finite, bins=HISTOGRAM_BINS), bounds))

    def _write_histograms(self) -> None:
        if not self.histograms:
            return
        step = self.schedule.step
        for kind, name, counts, bounds in self.histograms:
            low, high = bounds.tolist()
            self.output.add_histogram(kind, name, step, counts.tolist(), low, high if high > low else low + 1e-12)

    def _dump_gradient(self, step: int, kind: str, name: str) -> None:
        if kind != "grad_reduced":
            return
        for parameter_name, parameter in self._parameters():
            grad = self._gradient(parameter)
            if parameter_name == name and grad is not None:
                save_pt(grad, self.output.folder / f"anomaly_step{step}_{name}.pt")

    def finish(self) -> None:
        """Write what is pending and remove every hook."""
        super().finish()
        for handle in self.handles:
            handle.remove()
        self.handles.clear()


def __getattr__(name: str) -> Any:
    # MonitorCallback needs transformers; import it only when asked for
    if name == "MonitorCallback":
        from msprobe.pytorch.monitor.huggingface import MonitorCallback

        return MonitorCallback
    raise AttributeError(name)
