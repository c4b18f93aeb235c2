"""MindSpore checkpoints (``.ckpt``) for ``msprobe checkpoint_compare``.

A ``.ckpt`` is a protobuf message of named tensors: MindSpore's own reader
parses it, nothing in it runs.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from msprobe.core.errors import DataFileError


def load_checkpoint(path: str | Path) -> dict[str, np.ndarray] | None:
    """A ``.ckpt`` file's parameters by name; None for anything else."""
    path = Path(path)
    if not (path.is_file() and path.suffix == ".ckpt"):
        return None
    import mindspore as ms
    from msprobe.mindspore.dump.tensors import to_numpy

    try:
        parameters = ms.load_checkpoint(str(path))
    except Exception as exc:  # a truncated or foreign file: MindSpore's reader raises its own errors
        raise DataFileError(path, f"not a readable MindSpore checkpoint ({exc.__class__.__name__}: {exc})") from None
    return {name: np.array(to_numpy(value)) for name, value in parameters.items() if isinstance(value, ms.Tensor)}
