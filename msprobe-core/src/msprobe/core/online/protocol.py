"""The wire format of online pre-check, shared by the TCP/TLS stream and the shared-directory mode.

A frame is ``MAGIC (4) | version (1) | kind (1) | length (8, big endian) | payload``.
An API payload is ``header length (4) | JSON header | .npy blobs``: the header
holds the dump.json entries of one API (forward, and backward when present)
and the byte length of each tensor blob by its data_name. Tensors travel as
``.npy`` bytes read with ``allow_pickle=False``: nothing a sender sends is
ever executed. Frames longer than the receiver's limit are refused before
they are read.
"""

from __future__ import annotations

import io
import ipaddress
import json
import os
import secrets
import stat
import struct
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from msprobe.core.errors import DataFileError
from msprobe.core.files import new_file

MAGIC = b"MSPB"
VERSION = 1
HELLO, API, DONE = 1, 2, 3
KINDS = {HELLO, API, DONE}
PREFIX = struct.Struct(">4sBBQ")
DEFAULT_MAX_FRAME = 1 << 30  # 1 GiB
MAX_HELLO = 4096  # a HELLO holds a sender name and a token; it is read before the token is checked


class ProtocolError(Exception):
    """A frame that is not ours, or too large, or cut short: the connection is dropped."""


@dataclass
class ApiMessage:
    rank: int
    step: int
    entries: dict[str, Any]  # name -> dump.json entry (forward, and the backward when there is one)
    arrays: dict[str, np.ndarray] = field(default_factory=dict)  # data_name -> tensor


def read_token(path: str | Path | None) -> str | None:
    """The shared token from its file (the token itself never sits in the config)."""
    if not path:
        return None
    file = Path(path)
    try:
        token = file.read_text(encoding="utf-8").strip()
    except (OSError, UnicodeDecodeError) as exc:
        raise DataFileError(file, f"cannot read the token file ({exc})") from None
    if not token:
        raise DataFileError(file, "the token file is empty")
    return token


def is_loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False  # a host name: it may resolve anywhere


def loopback_token_path(port: int) -> Path:
    """Where a receiver listening on this machine without a configured token keeps the one it made: a
    folder of this user's only, so a sender of the same user finds it and other users cannot (as Jupyter
    does with its runtime files)."""
    base = os.environ.get("XDG_RUNTIME_DIR") or str(Path.home() / ".cache")
    return Path(base) / "msprobe" / f"receiver-{port}.token"


def write_loopback_token(port: int) -> tuple[str, Path]:
    """A new random token in a file only this user can read (0600, in a 0700 folder, never through a link)."""
    path = loopback_token_path(port)
    path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
    if path.parent.is_symlink() or path.parent.stat().st_uid != os.getuid():
        raise DataFileError(path.parent, "is not a folder of this user's own; no token is written there")
    os.chmod(path.parent, 0o700)
    token = secrets.token_hex(32)
    with new_file(path, "w") as handle:  # the project's one private writer; this file is the user's alone
        os.fchmod(handle.fileno(), 0o600)
        handle.write(token)
    return token, path


def read_loopback_token(port: int) -> str | None:
    """The token a receiver on this machine made for ``port``, when this user may read it; None when there
    is none (a receiver with a configured token, or of another tool)."""
    path = loopback_token_path(port)
    try:
        descriptor = os.open(path, os.O_RDONLY | getattr(os, "O_NOFOLLOW", 0))
    except OSError:
        return None
    with os.fdopen(descriptor, "r", encoding="utf-8") as handle:
        info = os.fstat(handle.fileno())
        if not stat.S_ISREG(info.st_mode) or info.st_uid != os.getuid() or info.st_mode & 0o077:
            return None  # not a file this user alone wrote: not to be trusted with the token
        token = handle.read(256).strip()
    return token or None


def frame(kind: int, payload: bytes) -> bytes:
    return PREFIX.pack(MAGIC, VERSION, kind, len(payload)) + payload


def parse_prefix(prefix: bytes, max_frame: int) -> tuple[int, int]:
    if len(prefix) < PREFIX.size:
        raise ProtocolError(f"{len(prefix)} bytes: shorter than a frame header ({PREFIX.size})")
    magic, version, kind, length = PREFIX.unpack(prefix[: PREFIX.size])
    if magic != MAGIC or version != VERSION or kind not in KINDS:
        raise ProtocolError("not an msprobe online frame")
    if length > max_frame:
        raise ProtocolError(f"frame of {length} bytes is over the limit of {max_frame}")
    return kind, length


def encode_json(kind: int, value: Any) -> bytes:
    return frame(kind, json.dumps(value).encode())


def encode_api(message: ApiMessage) -> bytes:
    blobs = []
    sizes = {}
    for name, array in message.arrays.items():
        buffer = io.BytesIO()
        np.save(buffer, np.asarray(array), allow_pickle=False)  # keeps 0-d arrays 0-d
        blob = buffer.getvalue()
        blobs.append(blob)
        sizes[name] = len(blob)
    header = json.dumps(
        {"rank": message.rank, "step": message.step, "entries": message.entries, "blobs": sizes}
    ).encode()
    return frame(API, struct.pack(">I", len(header)) + header + b"".join(blobs))


def decode_api(payload: bytes) -> ApiMessage:
    try:
        (size,) = struct.unpack(">I", payload[:4])
        header = json.loads(payload[4 : 4 + size])
        offset = 4 + size
        arrays = {}
        for name, length in header["blobs"].items():
            arrays[name] = np.load(io.BytesIO(payload[offset : offset + length]), allow_pickle=False)
            offset += length
        if offset != len(payload):
            raise ProtocolError("API frame has trailing bytes")
        rank, step, entries = header["rank"], header["step"], header["entries"]
        if type(rank) is not int or type(step) is not int or rank < 0 or step < 0 or not isinstance(entries, dict):
            raise ProtocolError("API frame: rank and step must be non-negative integers, entries an object")
        return ApiMessage(rank, step, entries, arrays)
    except ProtocolError:
        raise
    except Exception as exc:  # malformed JSON, truncated blobs, a pickled array...
        raise ProtocolError(f"malformed API frame ({type(exc).__name__}: {exc})") from None


_COUNTS = ("sent", "dropped", "rank")
_MAX_NAME = 128


def decode_hello(payload: bytes) -> tuple[str | None, str | None]:
    """(sender name, token) of a HELLO frame; each a short string when present."""
    value = decode_json(payload)
    sender, token = value.get("sender"), value.get("token")
    for field_name, text in (("sender", sender), ("token", token)):
        if text is not None and (not isinstance(text, str) or len(text) > _MAX_NAME * 8):
            raise ProtocolError(f"HELLO frame: '{field_name}' must be a short string")
    if token is not None and not token.isascii():  # tokens are hex; hmac compares ASCII text only
        raise ProtocolError("HELLO frame: 'token' must be ASCII")
    if sender is not None and (len(sender) > _MAX_NAME or not sender.isprintable()):
        raise ProtocolError("HELLO frame: 'sender' must be a short printable name")
    return sender, token


def decode_done(payload: bytes) -> dict[str, int]:
    """The counts of a DONE frame, each a non-negative integer (a missing one is 0)."""
    value = decode_json(payload)
    counts = {}
    for key in _COUNTS:
        number = value.get(key, 0)
        if type(number) is not int or not 0 <= number < 2**63:
            raise ProtocolError(f"DONE frame: '{key}' must be a non-negative integer, not {number!r}")
        counts[key] = number
    return counts


def decode_json(payload: bytes) -> dict:
    try:
        value = json.loads(payload)
    except ValueError as exc:
        raise ProtocolError(f"malformed control frame ({exc})") from None
    except RecursionError:  # JSON nested thousands deep: no control frame is
        raise ProtocolError("malformed control frame (nested too deeply)") from None
    if not isinstance(value, dict):
        raise ProtocolError("malformed control frame")
    return value
