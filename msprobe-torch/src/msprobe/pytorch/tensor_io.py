"""Reading and writing ``.pt`` tensor files safely (``weights_only=True``)."""

from __future__ import annotations

import warnings
from pathlib import Path
from typing import Any

import numpy as np
import torch

from msprobe.core.errors import DataFileError
from msprobe.core.files import regular_file, write_new_file
from msprobe.core.trees import leaves, map_leaves


def tensor_to_numpy(tensor: torch.Tensor) -> np.ndarray:
    """A host numpy copy; dtypes numpy lacks (bfloat16, float8) widen to float32.

    Always a copy, never a view of the tensor's own memory: ``.numpy()`` marks the storage it views as never to
    be resized, and FSDP2 frees a gathered parameter by resizing its storage to 0."""
    tensor = tensor.detach()
    tensor = tensor.cpu() if tensor.device.type != "cpu" else tensor.clone()
    if tensor.is_complex():
        return tensor.resolve_conj().numpy()
    try:
        return tensor.numpy()
    except TypeError:
        widened = tensor.float().numpy().view(Widened)
        widened.source_dtype = str(tensor.dtype).removeprefix("torch.")
        return widened


class Widened(np.ndarray):
    """A tensor numpy cannot hold (bfloat16, float8) read as float32, remembering what it was."""

    source_dtype: str = ""


def _why_unreadable(exc: Exception) -> str:
    """One line: torch's refusal of a pickle that holds more than tensors runs to a page of advice."""
    text = str(exc)
    if "Weights only load failed" in text:
        lines = [line.strip() for line in text.splitlines()]
        detail = next((line for line in lines if line.startswith(("Unsupported", "Trying to load"))), "")
        return "it holds objects other than tensors, which are never unpickled" + (f": {detail}" if detail else "")
    first = next((line.strip() for line in text.splitlines() if line.strip()), "")
    return f"{exc.__class__.__name__}: {first}" if first else exc.__class__.__name__


def load_pt(path: str | Path) -> np.ndarray:
    regular_file(path, "tensor file")
    try:
        with warnings.catch_warnings():  # torch's note on the pickle protocol is no news to the user
            warnings.simplefilter("ignore")
            value = torch.load(path, map_location="cpu", weights_only=True)
    except FileNotFoundError:
        raise DataFileError(path, "tensor file not found") from None
    except Exception as exc:  # pickle errors, truncated files, unsafe content
        raise DataFileError(path, f"not a readable tensor file ({_why_unreadable(exc)})") from None
    if not isinstance(value, torch.Tensor):
        raise DataFileError(path, f"holds a {type(value).__name__}, not a tensor")
    return tensor_to_numpy(value)


def save_pt(array: Any, path: str | Path) -> None:
    # np.asarray keeps a 0-d array 0-d, where np.ascontiguousarray makes it 1-d (a scalar loss saved as [1])
    tensor = array if isinstance(array, torch.Tensor) else torch.from_numpy(np.asarray(array, order="C"))
    write_new_file(Path(path), lambda handle: torch.save(tensor.detach().cpu().clone(), handle))


def is_tensor(value: Any) -> bool:
    return isinstance(value, torch.Tensor)


def map_tensors(value: Any, function: Any) -> Any:
    """Apply ``function`` to every tensor in nested arguments."""
    return map_leaves(value, is_tensor, function)


def tensors_in(value: Any) -> list[torch.Tensor]:
    return leaves(value, is_tensor)
