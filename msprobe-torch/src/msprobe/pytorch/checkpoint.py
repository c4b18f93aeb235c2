"""PyTorch checkpoints for ``msprobe checkpoint_compare``: a saved ``state_dict`` and Megatron's folders.

Files are read with ``torch.load(weights_only=True)``: tensors, containers
and plain values only, no code. Megatron's ``model_optim_rng.pt`` also holds
its arguments (an ``argparse.Namespace``) and random states (numpy arrays);
those few types are allowed by name, everything else is refused.
"""

from __future__ import annotations

import argparse
import re
import zipfile
from pathlib import Path
from typing import Any

import numpy as np
import torch

from msprobe.core.checkpoint import model_part, tensors_in
from msprobe.core.errors import DataFileError
from msprobe.pytorch.tensor_io import tensor_to_numpy

_SUFFIXES = (".pt", ".pth", ".bin", ".tar")
_ITERATION_FILE = "latest_checkpointed_iteration.txt"
_SHARD = re.compile(r"^mp_rank_\d+(_\d+)*$")


def _safe_globals() -> list[Any]:
    """What Megatron's checkpoints hold beside tensors: its arguments and numpy random states."""
    allowed: list[Any] = [argparse.Namespace, np.ndarray, np.dtype]
    for module, name in (("numpy.core.multiarray", "_reconstruct"), ("numpy._core.multiarray", "_reconstruct")):
        try:
            allowed.append(getattr(__import__(module, fromlist=[name]), name))
        except (ImportError, AttributeError):
            continue
    allowed += [type(np.dtype(kind)) for kind in ("uint32", "float64", "int64")]
    return allowed


def _load(file: Path) -> dict[str, np.ndarray]:
    try:
        with torch.serialization.safe_globals(_safe_globals()):
            value = torch.load(file, map_location="cpu", weights_only=True)
    except Exception as exc:  # pickle errors, truncated files, a type that is not allowed
        raise DataFileError(file, f"not a readable PyTorch checkpoint ({exc.__class__.__name__}: {exc})") from None
    return {
        name: tensor_to_numpy(t) for name, t in tensors_in(model_part(value), lambda v: isinstance(v, torch.Tensor))
    }


def _is_torch_file(path: Path) -> bool:
    if path.suffix in _SUFFIXES:
        return True
    return zipfile.is_zipfile(path)  # torch.save's format, whatever the name


def _megatron_iteration(folder: Path) -> Path:
    """``latest_checkpointed_iteration.txt`` names the iteration folder to read (``iter_0000010``, or ``release``)."""
    marker = folder / _ITERATION_FILE
    text = marker.read_text(encoding="utf-8", errors="replace").strip()
    if text == "release":
        return folder / "release"
    if not text.isdigit():
        raise DataFileError(marker, f"holds {text[:40]!r}, not an iteration number")
    return folder / f"iter_{int(text):07d}"


def _shards(folder: Path) -> list[Path]:
    return sorted(child for child in folder.iterdir() if child.is_dir() and _SHARD.match(child.name))


def load_checkpoint(path: str | Path) -> dict[str, np.ndarray] | None:
    """A ``state_dict`` file, a folder of them, or a Megatron checkpoint folder; None for anything else.

    Megatron shards (``mp_rank_00``, ``mp_rank_01_000``...) are compared
    shard with shard: with more than one, a name carries its shard
    (``mp_rank_01/decoder.layers.0.mlp.linear_fc1.weight``).
    """
    path = Path(path)
    if path.is_file():
        return _load(path) if _is_torch_file(path) else None
    if not path.is_dir():
        return None
    if (path / _ITERATION_FILE).is_file():
        path = _megatron_iteration(path)
        if not path.is_dir():
            raise DataFileError(path, "the iteration named by latest_checkpointed_iteration.txt is missing")
    shards = _shards(path)
    if shards:
        tensors: dict[str, np.ndarray] = {}
        for shard in shards:
            files = sorted(f for f in shard.iterdir() if f.is_file() and _is_torch_file(f))
            if not files:
                raise DataFileError(shard, "holds no checkpoint file (model_optim_rng.pt)")
            for file in files:
                for name, array in _load(file).items():
                    tensors[f"{shard.name}/{name}" if len(shards) > 1 else name] = array
        return tensors
    files = sorted(f for f in path.iterdir() if f.is_file() and f.suffix in _SUFFIXES)
    if not files:
        return None
    tensors = {}
    for file in files:  # a Hugging Face folder of pytorch_model-0000N-of-0000M.bin shards
        tensors.update(_load(file))
    return tensors
