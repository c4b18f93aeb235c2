"""Tensor files: ``.npy``, which needs no framework to read or write, and the backends' own formats (``.pt``),
read and written by the installed backend whose suffix they carry. The one home of reading a tensor file by its
suffix: compare, graph, diagnosis, the merge of sharded runs and ``msprobe parse`` all ask here."""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

import numpy as np

from msprobe.core.errors import DataFileError, MsprobeError
from msprobe.core.files import regular_file, write_new_file

logger = logging.getLogger(__name__)


def load_npy(path: str | Path) -> np.ndarray:
    """Load without pickle: a dump file must never run code."""
    regular_file(path, "tensor file")
    try:
        with open(path, "rb") as handle:
            if handle.read(6) != b"\x93NUMPY":  # np.load would open an .npz (a zip) lazily, or a pickle
                raise DataFileError(path, "not an .npy file: it does not start with numpy's magic bytes")
            handle.seek(0)
            return np.lib.format.read_array(handle, allow_pickle=False)
    except FileNotFoundError:
        raise DataFileError(path, "tensor file not found") from None
    except (ValueError, OSError, EOFError) as exc:
        raise DataFileError(path, f"not a readable .npy file ({exc})") from None


def save_npy(array: Any, path: str | Path) -> None:
    file = Path(path)
    file = file if file.suffix == ".npy" else file.with_name(file.name + ".npy")  # as np.save names it
    write_new_file(file, lambda handle: np.save(handle, np.asarray(array), allow_pickle=False))


def tensor_readers() -> dict[str, Any]:
    """Tensor file readers by suffix; a backend's framework is imported only when its first file is read."""
    readers: dict[str, Any] = {".npy": load_npy}
    try:
        from msprobe.core.plugins import get_registry

        for backend in get_registry().backends().values():
            if backend.tensor_suffix and backend.tensor_suffix not in readers:
                readers[backend.tensor_suffix] = backend.load_tensor
    except Exception as exc:  # compare without plugins still works for statistics and .npy
        logger.debug("no tensor readers from plugins: %s", exc)
    return readers


def backend_for(suffix: str) -> Any:
    """The installed backend whose tensor files end in ``suffix``; a clear error when none does."""
    from msprobe.core.plugins import get_registry

    for backend in get_registry().backends().values():
        if backend.tensor_suffix == suffix:
            return backend
    raise MsprobeError(f"no installed backend reads '{suffix}' files (for .pt: pip install msprobe-torch)")
