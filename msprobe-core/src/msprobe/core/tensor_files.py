"""``.npy`` tensor files, which need no framework to read or write."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np

from msprobe.core.errors import DataFileError
from msprobe.core.files import regular_file, write_new_file


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
