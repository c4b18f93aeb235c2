"""What a backend's tensor summarizer offers the core: the one contract both frameworks' summarizers keep.

The summarizer turns a framework tensor into its dump.json value. The
core's encoder calls it for each tensor, the collector switches its tensor
files on and off and tells it the step's folder, and the recorder clears it
between dumped spans. Everything framework-specific (how a tensor is read,
on which device, in which batch) stays behind these members.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal, Protocol, runtime_checkable

# the tasks whose summaries carry statistics (unless an xor checksum stands in for them)
STATISTICS_TASKS = ("statistics", "tensor", "overflow_check")


@dataclass(frozen=True)
class SummaryPlan:
    """What every tensor summary of a run holds, decided once from its task and ``summary_mode``; both
    backends' summarizers read it instead of deciding again.

    ``checksum`` is written in the ``md5`` field, the name mindstudio-probe gives it: ``"crc32"`` for
    ``summary_mode: md5`` (a CRC-32, as the reference computes), ``"xor"`` for 26.x's XOR of 64-bit words,
    which stands in for the statistics."""

    statistics: bool  # Max, Min, Mean, Norm
    checksum: Literal["crc32", "xor"] | None
    files: bool  # each tensor's values written to a file (task tensor)

    @property
    def caches(self) -> bool:
        """Whether anything is measured that a tensor seen before, unchanged, could reuse."""
        return self.statistics or self.checksum is not None


def summary_plan(task: str, summary_mode: str) -> SummaryPlan:
    """The plan of a run of ``task`` with ``summary_mode`` (as config.json's sections resolve it)."""
    xor = summary_mode == "xor"
    checksum: Literal["crc32", "xor"] | None = "xor" if xor else "crc32" if summary_mode == "md5" else None
    return SummaryPlan(statistics=task in STATISTICS_TASKS and not xor, checksum=checksum, files=task == "tensor")


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
