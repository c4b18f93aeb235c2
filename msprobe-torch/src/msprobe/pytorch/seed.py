"""Reproducibility switches, with the reference's ``seed_all`` signature."""

from __future__ import annotations

import logging
import os
import random

import numpy as np
import torch

from msprobe.core.messages import show_in_training

logger = logging.getLogger(__name__)


def seed_all(seed: int = 1234, mode: bool = False, rm_dropout: bool = True) -> None:
    """Seed Python, numpy and torch; ``mode=True`` also asks for deterministic kernels.

    ``rm_dropout`` sets the dropout probability of every functional dropout
    call to 0, so two runs differ only in what is being debugged.
    """
    if not isinstance(seed, int) or isinstance(seed, bool) or not 0 <= seed <= 2**32 - 1:
        from msprobe.core.errors import UsageError

        raise UsageError(f"seed must be an integer in [0, 2**32 - 1], got {seed!r}")
    random.seed(seed)
    os.environ["PYTHONHASHSEED"] = str(seed)
    np.random.seed(seed)
    torch.manual_seed(seed)
    if torch.cuda.is_available():
        torch.cuda.manual_seed_all(seed)
    if mode:
        os.environ.setdefault("CUBLAS_WORKSPACE_CONFIG", ":4096:8")
        torch.use_deterministic_algorithms(True)
        torch.backends.cudnn.deterministic = True
        torch.backends.cudnn.benchmark = False
    if rm_dropout:
        remove_dropout()
    show_in_training()  # called before any debugger exists, it is still shown, as the reference shows it
    logger.info("seed_all: seed=%s deterministic=%s rm_dropout=%s", seed, mode, rm_dropout)


_DROPOUT_NAMES = ("dropout", "dropout1d", "dropout2d", "dropout3d", "alpha_dropout", "feature_alpha_dropout")


def remove_dropout() -> None:
    """Make functional dropouts no-ops (p=0), as the reference does for comparable runs."""
    from torch.nn import functional

    for name in _DROPOUT_NAMES:
        original = getattr(functional, name, None)
        if original is None or getattr(original, "_msprobe_no_dropout", False):
            continue

        def no_dropout(input, p=0.5, training=True, inplace=False, _original=original):
            return _original(input, 0.0, training, inplace)

        no_dropout._msprobe_no_dropout = True
        no_dropout.__wrapped__ = original
        setattr(functional, name, no_dropout)


def restore_dropout() -> None:
    """Undo :func:`remove_dropout` (for tests and for scripts that seed twice with different wishes)."""
    from torch.nn import functional

    for name in _DROPOUT_NAMES:
        current = getattr(functional, name, None)
        if getattr(current, "_msprobe_no_dropout", False):
            setattr(functional, name, current.__wrapped__)
