"""What a backend's tensor summarizer offers the core: the one contract both frameworks' summarizers keep.

The summarizer turns a framework tensor into its dump.json value. The
core's encoder calls it for each tensor, the collector switches its tensor
files on and off and tells it the step's folder, and the recorder clears it
between dumped spans. Everything framework-specific (how a tensor is read,
on which device, in which batch) stays behind these members.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Protocol, runtime_checkable


@runtime_checkable
class TensorSummarizer(Protocol):
    """A backend's summarizer, as the core calls it.

    ``caches``: it reuses the values of a tensor seen before, so the dump
    must tell it of every write it sees (the recorder then watches the
    in-place calls it does not record). A summarizer may also offer
    ``nonfinite_later(tensor)``, the overflow check's screen that waits for
    a device batch (see ``ValueEncoder.screen_later``).
    """

    caches: bool

    def __call__(self, tensor: Any, data_stem: str) -> Any:
        """The tensor's dump.json value; ``data_stem`` names its file, if one is written."""

    def nonfinite(self, tensor: Any) -> bool:
        """Whether the tensor holds inf or nan (the overflow check's screen)."""

    def set_tensor_dir(self, folder: Path | None) -> None:
        """The step's dump_tensor_data folder, or None between steps and for tasks without one."""

    def set_saving(self, on: bool) -> None:
        """Tensor files (and full statistics) on or off: the overflow check turns them on for a call it keeps."""

    def clear(self) -> None:
        """Forget what was measured: the dump was off, and writes went unseen."""

    def close(self) -> None:
        """The run ends: let go of threads and files."""
