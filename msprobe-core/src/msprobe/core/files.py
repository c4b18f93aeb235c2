"""Reading files someone else wrote: only regular files, each refusal one clear line naming the file.

A FIFO given for a dump.json would block the reader for good, and ``/dev/zero`` would be read until memory runs
out; neither is a file a tool wrote.
"""

from __future__ import annotations

import os
import stat
from pathlib import Path
from typing import Any

from msprobe.core.errors import DataFileError


def regular_file(path: str | Path, what: str) -> Path:
    """``path``, when it names a regular file (through a symbolic link or not); else a ``DataFileError`` that
    says what ``what`` (dump.json, compare.json...) found there instead."""
    file = Path(path)
    try:
        mode = os.stat(file).st_mode
    except FileNotFoundError:
        raise DataFileError(file, f"{what} not found") from None
    except OSError as exc:
        raise DataFileError(file, f"{what} cannot be read ({exc.strerror})") from None
    if stat.S_ISDIR(mode):
        raise DataFileError(file, f"is a folder where a file ({what}) should be")
    if not stat.S_ISREG(mode):
        raise DataFileError(file, f"is not a regular file (a FIFO, a device...) where a file ({what}) should be")
    return file


def plain_yaml(text: str) -> Any:
    """YAML without anchors and aliases, safely loaded. No mapping or config msprobe reads needs them, and a
    kilobyte of aliases (a "billion laughs") expands into gigabytes once anything walks what it holds."""
    import yaml

    class NoAliases(yaml.SafeLoader):
        def compose_node(self, parent: Any, index: Any) -> Any:
            if self.check_event(yaml.AliasEvent):
                event = self.peek_event()
                raise yaml.composer.ComposerError(
                    None, None, "aliases (*name) are not allowed in msprobe's YAML files", event.start_mark
                )
            return super().compose_node(parent, index)

    return yaml.load(text, Loader=NoAliases)
