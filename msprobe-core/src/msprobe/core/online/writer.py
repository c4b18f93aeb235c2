"""A DumpWriter stand-in that sends each entry, with the tensors measured for it, to the receiver."""

from __future__ import annotations

from typing import Any

from msprobe.core.online.protocol import ApiMessage


class OnlineWriter:
    def __init__(self, sender: Any, arrays: dict[str, Any], session: Any):
        self.sender = sender
        self.arrays = arrays  # filled by the tensor summarizer while an entry is encoded
        self.session = session

    def add(
        self, name: str, entry: dict[str, Any], deferred: bool = False, stack: Any = None, parent: Any = None
    ) -> None:
        """Sends the entry with its tensors; stacks and the hierarchy stay with the training job."""
        taken = dict(self.arrays)
        self.arrays.clear()
        self.sender.send(ApiMessage(self.session.rank or 0, self.session.step, {name: entry}, taken))

    def reserve(self, name: str) -> None:
        pass

    def set_parent(self, name: str, parent: Any) -> None:
        pass

    def flush(self) -> None:
        pass

    def close(self) -> None:
        pass
