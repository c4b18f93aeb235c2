"""The PyTorch side of ``config_check``'s collection inside a training script."""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any

import torch

from msprobe.core.dump.checksum import crc32_hex

# APIs that draw from torch's random generators, or seed them
_TORCH_RANDOM = ("manual_seed", "seed", "rand", "randn", "randint", "randperm", "rand_like", "randn_like",
                 "randint_like", "normal", "bernoulli", "multinomial", "poisson")  # fmt: skip
_TENSOR_RANDOM = ("uniform_", "normal_", "bernoulli_", "random_", "exponential_", "geometric_", "cauchy_",
                  "log_normal_")  # fmt: skip
_FUNCTIONAL_RANDOM = ("dropout", "dropout1d", "dropout2d", "dropout3d", "alpha_dropout", "feature_alpha_dropout",
                      "gumbel_softmax", "rrelu")  # fmt: skip
_INIT_RANDOM = ("uniform_", "normal_", "trunc_normal_", "xavier_uniform_", "xavier_normal_", "kaiming_uniform_",
                "kaiming_normal_", "orthogonal_", "sparse_")  # fmt: skip


class TorchConfigCheckProbe:
    def rank(self) -> int:
        distributed = torch.distributed
        return distributed.get_rank() if distributed.is_available() and distributed.is_initialized() else 0

    def parameters(self, model: Any) -> Iterable[tuple[str, Any]]:
        return model.named_parameters()

    def is_tensor(self, value: Any) -> bool:
        return isinstance(value, torch.Tensor)

    def checksum(self, tensor: Any) -> str:
        """CRC-32 of the tensor's bytes (in its own dtype, as laid out contiguously on the host)."""
        data = tensor.detach().cpu().contiguous().reshape(-1)
        return crc32_hex(data.view(torch.uint8).numpy() if data.numel() else b"")

    def on_forward(self, model: Any, callback: Callable[[tuple, dict], None]) -> Any:
        def hook(module: Any, args: tuple, kwargs: dict) -> None:
            callback(args, kwargs)

        return model.register_forward_pre_hook(hook, with_kwargs=True)

    def random_targets(self) -> list[tuple[Any, str, str]]:
        targets = [(torch, name, f"torch.{name}") for name in _TORCH_RANDOM if hasattr(torch, name)]
        targets += [(torch.Tensor, name, f"Tensor.{name}") for name in _TENSOR_RANDOM if hasattr(torch.Tensor, name)]
        functional = torch.nn.functional
        targets += [
            (functional, name, f"Functional.{name}") for name in _FUNCTIONAL_RANDOM if hasattr(functional, name)
        ]
        init = torch.nn.init
        targets += [(init, name, f"init.{name}") for name in _INIT_RANDOM if hasattr(init, name)]
        return targets
