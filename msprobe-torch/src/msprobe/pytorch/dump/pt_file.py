"""``.pt`` tensor files as torch.save writes them, without torch.save's cost per file.

A tensor dump writes thousands of small files per step, and torch.save
spends more on each than the write itself (a pickler class made per call,
the C++ zip writer and its own CRC-32). The archive itself is simple:
torch's fixed records (taken once from torch.save, so they follow the
installed torch), the tensor's pickle (made by torch's own reduce with
torch's persistent ids, the same bytes as torch.save's; cached by dtype,
shape and strides) and the tensor's bytes, read in place. ``torch.load`` reads the
result like any other ``.pt`` file, with ``weights_only`` or ``mmap``.
Anything unusual (subclasses, conjugate or negative views, quantized or
sparse tensors, files near the zip format's 4 GB limit) goes through
torch.save itself.
"""

from __future__ import annotations

import ctypes
import functools
import io
import pickle
import zipfile
from pathlib import Path
from typing import Any

import torch

from msprobe.core.dump.zip_archive import MAX_ARCHIVE_BYTES, ArchiveTemplate
from msprobe.core.files import open_new_file

_TEMPLATE_CACHE_SIZE = 4096


class _TorchPickler(pickle.Pickler):
    """torch.save's pickler for a tensor that owns its single storage (saved as record ``data/0``)."""

    def persistent_id(self, obj: Any) -> Any:
        if isinstance(obj, torch.storage.TypedStorage):
            storage = obj._untyped_storage
            storage_type = getattr(torch, obj._pickle_storage_type())
            location = torch.serialization.location_tag(storage)
            return ("storage", storage_type, "0", location, obj._size())
        if torch.is_storage(obj):  # dtypes saved as raw bytes (float8 and newer)
            storage_type = torch.serialization.normalize_storage_type(type(obj))
            return ("storage", storage_type, "0", torch.serialization.location_tag(obj), obj.nbytes())
        return None


def tensor_pickle(tensor: torch.Tensor) -> bytes:
    """``data.pkl`` of torch.save(tensor), for a detached, contiguous CPU tensor."""
    buffer = io.BytesIO()
    _TorchPickler(buffer, protocol=2).dump(tensor)
    return buffer.getvalue()


@functools.cache
def _archive_layout() -> tuple[str, str, tuple[tuple[str, bytes], ...]] | None:
    """torch.save's records for one tensor: the pickle's name, the data's name, and every record in order."""
    buffer = io.BytesIO()
    torch.save(torch.zeros(1), buffer)
    with zipfile.ZipFile(buffer) as archive:
        records = tuple((info.filename, archive.read(info)) for info in archive.infolist())
    prefix = records[0][0].split("/", 1)[0]
    names = {name for name, _ in records}
    pickle_name, data_name = f"{prefix}/data.pkl", f"{prefix}/data/0"
    if pickle_name not in names or data_name not in names:
        return None  # a torch whose archives look otherwise: torch.save does the work
    return pickle_name, data_name, records


class PtWriter:
    """Writes tensor files; one per dump, so its templates live as long as the dump."""

    def __init__(self) -> None:
        self._templates: dict[tuple[torch.dtype, tuple[int, ...], tuple[int, ...]], ArchiveTemplate] = {}

    def save(self, data: torch.Tensor, path: Path) -> None:
        """``data`` is a detached CPU tensor."""
        layout = _archive_layout()
        nbytes = data.numel() * data.element_size()
        if layout is None or nbytes > MAX_ARCHIVE_BYTES or not _plain(data, nbytes):
            with open_new_file(path, "wb") as handle:
                torch.save(data, handle)
            return
        key = (data.dtype, tuple(data.shape), data.stride())  # size-1 dimensions may have any stride
        template = self._templates.get(key)
        if template is None:
            if len(self._templates) >= _TEMPLATE_CACHE_SIZE:
                self._templates.clear()
            template = self._templates[key] = _template(layout, data, nbytes)
        template.write(path, host_bytes(data))


def _template(
    layout: tuple[str, str, tuple[tuple[str, bytes], ...]], data: torch.Tensor, nbytes: int
) -> ArchiveTemplate:
    pickle_name, data_name, records = layout
    pickled = tensor_pickle(data)
    filled = [(name, pickled if name == pickle_name else content) for name, content in records]
    return ArchiveTemplate(filled, data_name, nbytes)


def _plain(data: torch.Tensor, nbytes: int) -> bool:
    """A tensor whose pickle depends on nothing but its dtype, shape and strides."""
    return (
        type(data) is torch.Tensor
        and data.layout == torch.strided
        and data.is_cpu
        and not data.requires_grad
        and not data.is_quantized
        and not data.is_conj()
        and not data.is_neg()
        and data.is_contiguous()
        and data.storage_offset() == 0
        and data.untyped_storage().nbytes() == nbytes
        and not getattr(data, "__dict__", None)
    )


def host_bytes(data: torch.Tensor) -> Any:
    """The bytes of a CPU tensor, read in place: a byte memoryview that keeps the tensor alive (b"" when empty).

    Not through ``.numpy()``: that marks the storage it views as never to be resized again, and FSDP2 frees a
    gathered parameter by resizing its storage to 0, which then fails in the user's training."""
    if not data.numel():
        return b""
    data = data.resolve_conj().resolve_neg()  # the values' bytes, not a lazy view's
    if not data.is_contiguous():
        data = data.contiguous()
    size = data.numel() * data.element_size()
    if not _holds(data, size):
        if callable(getattr(data, "to_local", None)):  # a DTensor: the bytes of this rank's shard
            return host_bytes(data.to_local())
        raise RuntimeError(f"a {type(data).__name__} of {size} bytes whose memory cannot be read in place")
    memory = (ctypes.c_ubyte * size).from_address(data.data_ptr())
    memory.tensor = data  # held as long as any view of the bytes is
    return memoryview(memory).cast("B")


def _holds(data: torch.Tensor, size: int) -> bool:
    """Whether a contiguous tensor's ``size`` bytes lie in memory of its own: not a wrapper subclass with no
    storage (a DTensor), nor a storage resized to nothing (FSDP2's freed parameters)."""
    try:
        storage = data.untyped_storage()
        return storage.data_ptr() != 0 and storage.nbytes() >= data.storage_offset() * data.element_size() + size
    except (RuntimeError, NotImplementedError):
        return False
