"""``msprobe.pytorch.PrecisionDebugger``: the core lifecycle plus what needs torch."""

from __future__ import annotations

from typing import Any

import torch

from msprobe.core.recording.session import BaseDebugger


def distributed_rank() -> int | None:
    """The torch.distributed rank, or None when no process group is up."""
    dist = torch.distributed
    if dist.is_available() and dist.is_initialized():
        return dist.get_rank()
    return None


class PrecisionDebugger(BaseDebugger):
    framework = "pytorch"

    def current_rank(self) -> int | None:
        return distributed_rank()

    def is_model(self, obj: Any) -> bool:
        return isinstance(obj, torch.nn.Module)

    def make_grad_probe(self, model: Any) -> Any:
        from msprobe.core.errors import UsageError
        from msprobe.pytorch.grad_probe import GradProbe

        if not isinstance(model, torch.nn.Module):
            raise UsageError(f"grad_probe() takes the torch.nn.Module to watch, got {type(model).__name__}")
        return GradProbe(self.session, model)

    def _make_saver(self) -> Any:
        from msprobe.core.dump.values import ValueEncoder
        from msprobe.core.recording.debug_save import DebugSaver
        from msprobe.pytorch.dump.tensors import TensorSummarizer, describe_object

        summarizer = TensorSummarizer(self.config.task, self.config.summary_mode)
        encoder = ValueEncoder(torch.Tensor, summarizer, describe_object)
        return DebugSaver(self.session, encoder, summarizer.set_tensor_dir, register_gradient)


def register_gradient(value: Any, callback: Any) -> bool:
    """Call ``callback`` with ``value``'s structure of gradients once every tensor in it has one."""
    from msprobe.pytorch.dump.grad_taps import tensors_requiring_grad

    tensors = tensors_requiring_grad(value)
    if not tensors or not torch.is_grad_enabled():
        return False
    grads: dict[int, torch.Tensor] = {}

    def rebuild(item: Any) -> Any:
        if isinstance(item, torch.Tensor):
            return grads.get(id(item))
        if isinstance(item, (list, tuple)):
            return [rebuild(x) for x in item]
        if isinstance(item, dict):
            return {k: rebuild(x) for k, x in item.items()}
        return item

    for tensor in tensors:

        def hook(grad: torch.Tensor, key: int = id(tensor)) -> None:
            grads[key] = grad
            if len(grads) == len(tensors):
                callback(rebuild(value))

        tensor.register_hook(hook)
    return True
