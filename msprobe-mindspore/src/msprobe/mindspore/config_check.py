"""The MindSpore side of ``config_check``'s collection inside a training script."""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any

import numpy as np

import mindspore as ms
from mindspore import ops
from msprobe.core.dump.checksum import crc32_hex

_OPS_RANDOM = ("uniform", "standard_normal", "normal", "randint", "randperm", "rand", "randn", "rand_like",
               "randn_like", "randint_like", "multinomial", "bernoulli", "gamma", "poisson", "dropout",
               "shuffle")  # fmt: skip
_MINT_RANDOM = ("rand", "randn", "randint", "randperm", "rand_like", "randn_like", "randint_like", "normal",
                "bernoulli", "multinomial")  # fmt: skip


class MindSporeConfigCheckProbe:
    def rank(self) -> int:
        try:
            from mindspore.communication import get_rank

            return int(get_rank())
        except Exception:  # not initialised: a single process
            return 0

    def parameters(self, model: Any) -> Iterable[tuple[str, Any]]:
        return ((name, parameter) for name, parameter in model.parameters_and_names())

    def is_tensor(self, value: Any) -> bool:
        return isinstance(value, ms.Tensor)

    def checksum(self, tensor: Any) -> str:
        """CRC-32 of the tensor's bytes in its own dtype (bfloat16 as its 16 bits)."""
        if tensor.dtype == ms.bfloat16:
            values = tensor.astype(ms.float32).asnumpy().view(np.uint32) >> 16
            data = np.ascontiguousarray(values.astype(np.uint16))
        else:
            data = np.ascontiguousarray(tensor.asnumpy())
        return crc32_hex(data.reshape(-1).view(np.uint8) if data.size else b"")

    def on_forward(self, model: Any, callback: Callable[[tuple, dict], None]) -> Any:
        def hook(cell: Any, args: tuple) -> None:
            callback(args, {})

        return model.register_forward_pre_hook(hook)

    def random_targets(self) -> list[tuple[Any, str, str]]:
        targets = [(ms, "set_seed", "mindspore.set_seed")]
        targets += [(ops, name, f"ops.{name}") for name in _OPS_RANDOM if hasattr(ops, name)]
        try:
            from mindspore import mint
        except ImportError:
            return targets
        return targets + [(mint, name, f"mint.{name}") for name in _MINT_RANDOM if hasattr(mint, name)]
