"""``.npy`` files with numpy.save's bytes, without its Python work per file.

A tensor dump writes hundreds of small arrays per step. numpy.save builds
each header in Python and goes through Python's buffered file layers; for
an array of a few dozen kilobytes that doubles the cost of the file. Here
the header is built once per dtype and shape (by numpy's own format code)
and the file is one ``writev`` of header and data, read in place. Arrays
that are not C-contiguous plain data go to numpy.save.
"""

from __future__ import annotations

import functools
import io
from pathlib import Path

import numpy as np
from numpy.lib import format as npy_format

from msprobe.core.files import open_new_file, write_parts


@functools.lru_cache(maxsize=1024)
def _header(dtype: np.dtype, shape: tuple[int, ...]) -> bytes:
    """The magic string and header numpy.save writes for a C-ordered array (version 1.0 where it fits)."""
    fields = {"descr": npy_format.dtype_to_descr(dtype), "fortran_order": False, "shape": shape}
    buffer = io.BytesIO()
    try:
        npy_format.write_array_header_1_0(buffer, fields)
    except ValueError:  # a header over 64 KiB (a great many dimensions)
        buffer = io.BytesIO()
        npy_format.write_array_header_2_0(buffer, fields)
    return buffer.getvalue()


def write_npy(path: Path, array: np.ndarray) -> None:
    """``numpy.save(path, array)``, same bytes; created 0o640, never through a symlink, no partial file on failure."""
    if array.dtype.hasobject or array.dtype.fields is not None or not array.flags.c_contiguous:
        with open_new_file(path, "wb") as handle:
            np.save(handle, array, allow_pickle=False)
        return
    header = _header(array.dtype, array.shape)
    write_parts(path, [header, array.reshape(-1).view(np.uint8)] if array.size else [header])
