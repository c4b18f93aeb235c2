"""TrainerMon for MindSpore (PyNative): the core's MonitorSession with MindSpore tensors.

Gradients are those the optimizer receives (its forward pre-hook sees
them); optimizer state is the Adam-style moments the optimizer keeps
(``moment1``/``moment2`` or ``moments1``/``moments2``); activations come from
cell forward hooks. Statistics are small device tensors stacked and read
back once per step.
"""

from __future__ import annotations

import logging
from typing import Any

import numpy as np

import mindspore as ms
from mindspore import ops
from msprobe.core.monitor import MonitorSession

logger = logging.getLogger(__name__)
_FLOATS = (ms.float16, ms.bfloat16, ms.float32, ms.float64)
_MOMENTS = (("exp_avg", ("moment1", "moments1", "exp_avg")), ("exp_avg_sq", ("moment2", "moments2", "exp_avg_sq")))


def _stats(tensor: ms.Tensor, names: list[str], eps: float) -> ms.Tensor:
    data = tensor.astype(ms.float32) if tensor.dtype != ms.float64 else tensor
    if data.size == 0:
        return ms.Tensor(np.full(len(names), np.nan), ms.float64)
    absolute = data.abs()
    computed = {
        "min": data.min(),
        "max": data.max(),
        "mean": data.mean(),
        "norm": ops.sqrt((data * data).sum()),
        "amax": absolute.max(),
        "zeros": (absolute < eps).astype(data.dtype).mean(),
        "nans": ops.isnan(data).astype(data.dtype).sum(),
    }
    if "std" in names:
        computed["std"] = data.std() if data.size > 1 else ms.Tensor(0.0, data.dtype)
    if "dynamic_range" in names:
        host = np.abs(data.asnumpy())
        nonzero = host[host > 0]
        value = np.log2(host.max() / nonzero.min()) if nonzero.size else 0.0
        computed["dynamic_range"] = ms.Tensor(value, data.dtype)
    return ops.stack([computed[name].astype(ms.float64) for name in names])


def _group_size() -> int:
    try:
        from mindspore.communication import get_group_size

        return int(get_group_size())
    except Exception:
        return 1


class TrainerMon(MonitorSession):
    def __init__(self, config_file_path: str, process_group: Any = None, params_have_main_grad: bool = True):
        super().__init__(config_file_path)
        self.pending: list[tuple[str, str, int | None, ms.Tensor]] = []
        self.handles: list[Any] = []
        self.optimizer: Any = None
        self.single_process = True

    def set_monitor(
        self,
        model: Any,
        grad_acc_steps: int = 1,
        optimizer: Any = None,
        dp_group: Any = None,
        tp_group: Any = None,
        start_iteration: int = 0,
    ) -> TrainerMon:
        from msprobe.mindspore.debugger import distributed_rank

        if optimizer is None:
            from msprobe.core.errors import UsageError

            raise UsageError("MindSpore's TrainerMon needs the optimizer: set_monitor(model, optimizer=optimizer)")
        self.optimizer = optimizer
        self.grad_acc_steps = max(1, grad_acc_steps)
        rank = distributed_rank()
        self.single_process = rank is None or _group_size() == 1
        self.start(rank or 0, start_iteration)
        if self.config.wg_distribution and not self.single_process:
            for parameter in optimizer.parameters:
                if parameter.requires_grad:
                    self.handles.append(parameter.register_hook(self._local_gradient_hook(parameter.name)))
        self.print_structure([name for name, _ in model.cells_and_names() if name])
        if self.forward_activations or self.activation_gradients:
            for name, cell in model.cells_and_names():
                if name and self.watches_module(name):
                    self.handles.append(cell.register_forward_hook(self._activation_hook(name)))
        self.handles.append(optimizer.register_forward_pre_hook(self._on_optimizer))
        self.handles.append(optimizer.register_forward_hook(self._after_optimizer))
        return self

    def _is_float_tensor(self, value: Any) -> bool:
        return isinstance(value, ms.Tensor) and value.dtype in _FLOATS

    def _add(self, kind: str, name: str, micro_step: int | None, tensor: ms.Tensor) -> None:
        self.pending.append((kind, name, micro_step, _stats(tensor, self.config.ops, self.config.eps)))

    def _accumulate(self, total: ms.Tensor, grad: ms.Tensor) -> ms.Tensor:
        return total + grad

    def _clone(self, grad: ms.Tensor) -> ms.Tensor:
        return grad.copy()

    def _on_optimizer(self, optimizer: Any, args: tuple) -> None:
        self.poll_dynamic()
        local_gradients, self.local_gradients = self.local_gradients, {}
        try:
            if self.collecting():
                for name, local in local_gradients.items():
                    self._add("grad_unreduced", name, None, local)
            if self.collecting() and args:
                parameters = list(optimizer.parameters)
                for index, (parameter, grad) in enumerate(zip(parameters, args[0])):
                    if not self.watches_weight(parameter.name):
                        continue
                    if self.config.wg_distribution and grad is not None:
                        self._add("grad_reduced", parameter.name, None, grad)
                        if self.single_process:  # no reduction happened: the local gradient is this one
                            self.pending.append(("grad_unreduced", *self.pending[-1][1:]))
                    if self.config.param_distribution:
                        self._add("param", parameter.name, None, parameter)
                    if self.config.mv_distribution:
                        for kind, attributes in _MOMENTS:
                            moments = next((getattr(optimizer, a) for a in attributes if hasattr(optimizer, a)), None)
                            if moments is not None and index < len(moments):
                                self._add(kind, parameter.name, None, moments[index])
        except Exception as exc:  # never break training
            logger.warning("monitor: gradients not recorded (%s: %s)", type(exc).__name__, exc)

    def _after_optimizer(self, optimizer: Any, args: tuple, output: Any) -> None:
        """The step ends when the optimizer has run: Adam's update/ratio, then one host transfer."""
        try:
            if self.config.ur_distribution and self.collecting():
                self._collect_update_ratio(optimizer)
        except Exception as exc:  # never break training
            self._warn_once("ur_distribution", exc)
        rows = []
        if self.pending:
            values = ops.stack([stats for *_, stats in self.pending]).asnumpy().tolist()  # one host transfer
            rows = [(kind, name, micro, row) for (kind, name, micro, _), row in zip(self.pending, values)]
        self.pending.clear()
        self.end_step(rows)

    def _collect_update_ratio(self, optimizer: Any) -> None:
        """update = m/(sqrt(v)+eps), ratio = m/sqrt(v), with Adam's bias correction where it keeps beta powers."""
        first = next((getattr(optimizer, a) for a in _MOMENTS[0][1] if hasattr(optimizer, a)), None)
        second = next((getattr(optimizer, a) for a in _MOMENTS[1][1] if hasattr(optimizer, a)), None)
        if first is None or second is None or not hasattr(optimizer, "beta1"):
            raise ValueError("ur_distribution needs an Adam-family optimizer (moment1/moment2, beta1/beta2)")
        eps = float(getattr(optimizer, "eps", 1e-8))
        correction1 = correction2 = 1.0
        if hasattr(optimizer, "beta1_power") and hasattr(optimizer, "beta2_power"):
            correction1 = 1.0 - float(optimizer.beta1_power.asnumpy())
            correction2 = 1.0 - float(optimizer.beta2_power.asnumpy())
        for parameter, moment, squared in zip(optimizer.parameters, first, second):
            if not self.watches_weight(parameter.name):
                continue
            moment_hat = moment / correction1
            root = ops.sqrt(squared / correction2)
            self._add("update", parameter.name, None, moment_hat / (root + eps))
            self._add("ratio", parameter.name, None, moment_hat / root)

    def finish(self) -> None:
        super().finish()
        for handle in self.handles:
            handle.remove()
        self.handles.clear()
