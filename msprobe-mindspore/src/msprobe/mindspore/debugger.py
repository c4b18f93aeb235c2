"""``msprobe.mindspore.PrecisionDebugger``: the core lifecycle plus what needs MindSpore."""

from __future__ import annotations

from typing import Any

from msprobe.core.recording.session import BaseDebugger


def distributed_rank() -> int | None:
    """The communication rank, or None when MindSpore's communication is not initialised."""
    try:
        from mindspore.communication import GlobalComm, get_rank

        # GlobalComm.INITED, not management.is_initialized(): that one needs a device_target argument in 2.10
        return int(get_rank()) if GlobalComm.INITED else None
    except Exception:  # no communication package: a single-device run
        return None


class PrecisionDebugger(BaseDebugger):
    framework = "mindspore"

    def current_rank(self) -> int | None:
        return distributed_rank()

    def is_model(self, obj: Any) -> bool:
        from mindspore import nn

        return isinstance(obj, nn.Cell)

    def start_kernel_dump(self) -> None:
        from msprobe.mindspore.kernel_dump import enable_kernel_dump

        enable_kernel_dump(self.config, self.current_rank())

    def check_execution_mode(self) -> None:
        import mindspore as ms
        from msprobe.core.errors import UsageError

        if self.config.level in ("L0", "L1", "mix") and ms.get_context("mode") == ms.GRAPH_MODE:
            raise UsageError(
                f"level {self.config.level} hooks cells and APIs as they run, which needs "
                "ms.set_context(mode=ms.PYNATIVE_MODE); in graph mode use level L2 (MindSpore's kernel dump)"
            )

    def make_grad_probe(self, optimizer: Any) -> Any:
        """The gradients the optimizer receives at each step."""
        from mindspore import nn
        from msprobe.core.errors import UsageError
        from msprobe.mindspore.grad_probe import GradProbe

        if not isinstance(optimizer, nn.Optimizer):
            raise UsageError(f"grad_probe() takes the mindspore.nn.Optimizer to watch, got {type(optimizer).__name__}")
        return GradProbe(self.session, optimizer)

    def _make_saver(self) -> Any:
        import mindspore as ms
        from msprobe.core.dump.values import ValueEncoder
        from msprobe.core.recording.debug_save import DebugSaver
        from msprobe.mindspore.dump.tensors import TensorSummarizer, describe_object

        summarizer = TensorSummarizer(self.config.task, self.config.summary_mode)
        encoder = ValueEncoder(ms.Tensor, summarizer, describe_object)
        return DebugSaver(self.session, encoder, summarizer.set_tensor_dir, register_gradient)


def register_gradient(value: Any, callback: Any) -> bool:
    """Call ``callback`` with the gradient of a saved tensor once MindSpore computes it."""
    import mindspore as ms

    if not isinstance(value, ms.Tensor) or isinstance(value, ms.Parameter):
        return False  # nested values: their gradients are not tracked on MindSpore
    value.register_hook(callback)
    return True
