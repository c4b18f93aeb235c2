"""The one version of msprobe, read from the installed distribution's metadata."""

from __future__ import annotations

from importlib import metadata


def msprobe_version() -> str:
    try:
        return metadata.version("msprobe-core")
    except metadata.PackageNotFoundError:  # running from a source tree
        return "0+unknown"


__version__ = msprobe_version()
