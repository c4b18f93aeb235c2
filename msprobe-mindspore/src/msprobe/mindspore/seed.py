"""Reproducibility switches for MindSpore, with the reference's signature."""

from __future__ import annotations

import logging
import os
import random

import numpy as np

import mindspore as ms
from msprobe.core.errors import UsageError
from msprobe.core.messages import show_in_training

logger = logging.getLogger(__name__)


def seed_all(seed: int = 1234, mode: bool = False, rm_dropout: bool = True) -> None:
    """Seed Python, numpy and MindSpore; ``mode=True`` asks for deterministic kernels.

    ``rm_dropout`` is accepted for signature compatibility with PyTorch; MindSpore
    dropout is removed by the dump itself when requested.
    """
    if not isinstance(seed, int) or isinstance(seed, bool) or not 0 <= seed <= 2**32 - 1:
        raise UsageError(f"seed must be an integer in [0, 2**32 - 1], got {seed!r}")
    random.seed(seed)
    os.environ["PYTHONHASHSEED"] = str(seed)
    np.random.seed(seed)
    ms.set_seed(seed)
    if mode:
        ms.set_context(deterministic="ON")
    show_in_training()  # called before any debugger exists, it is still shown, as the reference shows it
    logger.info("seed_all: seed=%s deterministic=%s rm_dropout=%s", seed, mode, rm_dropout)
