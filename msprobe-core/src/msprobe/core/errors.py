"""Errors that reach the user as one line of text.

Everything the tool raises on purpose derives from :class:`MsprobeError`; the
CLI prints ``str(error)`` and exits non-zero, the Python API lets it propagate.
Anything else escaping the tool is a bug.
"""

from __future__ import annotations

from pathlib import Path

EXIT_SAME, EXIT_DIFFERENT, EXIT_BAD_INPUT, EXIT_INTERNAL = 0, 1, 2, 3  # every command, docs/cli.md


class MsprobeError(Exception):
    """An error whose message is written for the user, not for a debugger: bad input or usage (exit 2), so a
    script can tell a broken dump from two runs that differ (exit 1)."""

    exit_code = EXIT_BAD_INPUT


class ConfigError(MsprobeError):
    """A config file or keyword argument is invalid; names the file and the field."""

    def __init__(self, message: str, path: str | Path | None = None, field: str | None = None):
        self.path = str(path) if path is not None else None
        self.field = field
        self.message = message
        where = self.path or "config"
        prefix = f"{where}: " + (f"{field}: " if field else "")
        super().__init__(prefix + message)

    def __reduce__(self):  # raised in a worker process, it crosses back to the parent whole
        return type(self), (self.message, self.path, self.field)


class BackendError(MsprobeError):
    """No backend, or more than one, could serve a request."""


class UsageError(MsprobeError):
    """The API was called in the wrong order or with the wrong kind of object."""


class DataFileError(MsprobeError):
    """A dump file, CSV or tensor file is missing or malformed; names the file."""

    def __init__(self, path: str | Path, message: str):
        self.path = str(path)
        self.message = message
        super().__init__(f"{path}: {message}")

    def __reduce__(self):  # raised in a worker process, it crosses back to the parent whole
        return type(self), (self.path, self.message)
