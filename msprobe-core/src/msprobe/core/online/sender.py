"""The training side of online pre-check: hand each API to a background sender, never block for long.

``send()`` puts an encoded frame into a bounded queue, waiting at most
``block_seconds``; when the queue stays full (the benchmark host is slow or
gone) the API is dropped and counted. A background thread runs an asyncio
connection (TLS 1.2+ with a client certificate when ``tls_path`` is set),
reconnects with back-off when the receiver goes away, and drops what it
cannot send meanwhile. In shared-directory mode each frame is written under
a temporary name and renamed into place, so the receiver never reads half
a file. ``close()`` sends DONE with the counts.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import queue
import ssl
import threading
import time
import uuid
from pathlib import Path

from msprobe.core.files import write_new_file
from msprobe.core.online import protocol

logger = logging.getLogger(__name__)

_STOP = object()
IDLE_BEFORE_CHECK = 0.5  # seconds without a write after which the connection is checked before the next


def client_ssl_context(tls_path: str) -> ssl.SSLContext:
    folder = Path(tls_path)
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    context.minimum_version = ssl.TLSVersion.TLSv1_2
    context.load_cert_chain(folder / "client.crt", folder / "client.key")
    context.load_verify_locations(folder / "ca.crt")
    context.check_hostname = False  # the CA is the project's own; the peer is named by host/port
    return context


class OnlineSender:
    def __init__(
        self,
        rank: int,
        host: str | None = None,
        port: int | None = None,
        tls_path: str | None = None,
        nfs_path: str | None = None,
        queue_size: int = 64,
        block_seconds: float = 0.5,
        connect_timeout: float = 2.0,
        token: str | None = None,
    ):
        self.rank = rank
        self.token = token  # presented in the HELLO frame to a receiver that expects one
        self.host, self.port = host or "127.0.0.1", port
        self.tls_path = tls_path or None
        self.nfs_path = Path(nfs_path) if nfs_path else None
        self.block_seconds = block_seconds
        self.connect_timeout = connect_timeout
        self.name = f"rank{rank}-{uuid.uuid4().hex[:8]}"
        self.queue: queue.Queue = queue.Queue(maxsize=queue_size)
        self.sent = 0
        self.dropped = 0
        self._sequence = 0
        self._reader: asyncio.StreamReader | None = None
        self._last_write = 0.0
        self._thread = threading.Thread(target=self._run, name="msprobe-online-sender", daemon=True)
        self._thread.start()

    # -- the training thread's side -------------------------------------------------------
    def send(self, message: protocol.ApiMessage) -> bool:
        data = protocol.encode_api(message)
        try:
            self.queue.put(data, timeout=self.block_seconds)
            return True
        except queue.Full:
            self.dropped += 1
            return False

    def close(self, timeout: float = 30.0) -> None:
        with contextlib.suppress(queue.Full):
            self.queue.put(_STOP, timeout=timeout)
        self._thread.join(timeout)
        if self.dropped:
            logger.warning("online pre-check: %d APIs were dropped (the benchmark host was slow or gone)", self.dropped)

    # -- the background thread ----------------------------------------------------------------
    def _run(self) -> None:
        if self.nfs_path is not None:
            self._run_directory()
        else:
            self._run_tcp()

    def _stats(self) -> dict:
        return {"sender": self.name, "rank": self.rank, "sent": self.sent, "dropped": self.dropped}

    def _run_directory(self) -> None:
        self.nfs_path.mkdir(parents=True, exist_ok=True)
        while True:
            item = self.queue.get()
            if item is _STOP:
                self._write_file(protocol.encode_json(protocol.DONE, self._stats()))
                return
            try:
                self._write_file(item)
                self.sent += 1
            except OSError as exc:
                self.dropped += 1
                logger.warning("online pre-check: cannot write to %s (%s)", self.nfs_path, exc)

    def _write_file(self, data: bytes) -> None:
        self._sequence += 1
        final = self.nfs_path / f"{self.name}_{self._sequence:09d}.msprobe"
        write_new_file(final, lambda handle: handle.write(data))  # renamed into place: never read half-written

    async def _connect(self) -> asyncio.StreamWriter | None:
        context = client_ssl_context(self.tls_path) if self.tls_path else None
        try:
            reader, writer = await asyncio.wait_for(
                asyncio.open_connection(self.host, self.port, ssl=context), self.connect_timeout
            )
            token = self.token
            if token is None and context is None and protocol.is_loopback(self.host) and self.port:
                token = protocol.read_loopback_token(int(self.port))  # made by a receiver of this user
            hello = self._stats() if token is None else {**self._stats(), "token": token}
            writer.write(protocol.encode_json(protocol.HELLO, hello))
            await writer.drain()
        except (OSError, asyncio.TimeoutError, ssl.SSLError) as exc:
            logger.debug("online pre-check: cannot reach %s:%s (%s)", self.host, self.port, exc)
            return None
        self._reader = reader
        self._last_write = time.monotonic()
        return writer

    async def _still_open(self, writer: asyncio.StreamWriter) -> bool:
        """Whether the receiver still holds the connection. It closes one that stayed idle past its
        idle_timeout; a write into it would seem to succeed and be lost, the DONE frame with it. Only a
        connection idle for a while is looked at, so a busy sender pays nothing."""
        if time.monotonic() - self._last_write > IDLE_BEFORE_CHECK:
            await asyncio.sleep(0.005)  # the loop polls the socket and its reader sees an end that arrived
        return not (writer.is_closing() or self._reader is None or self._reader.at_eof())

    async def _write(self, writer: asyncio.StreamWriter, data: bytes) -> None:
        writer.write(data)
        await writer.drain()
        self._last_write = time.monotonic()

    def _run_tcp(self) -> None:
        """A plain thread with its own event loop: blocking on the queue never touches an executor."""
        loop = asyncio.new_event_loop()
        writer = None
        backoff, next_attempt = 0.05, 0.0
        try:
            while True:
                item = self.queue.get()
                if item is _STOP:
                    break
                if writer is not None and not loop.run_until_complete(self._still_open(writer)):
                    writer.close()
                    writer = None
                if writer is None and time.monotonic() >= next_attempt:
                    writer = loop.run_until_complete(self._connect())
                    if writer is None:
                        next_attempt = time.monotonic() + backoff
                        backoff = min(backoff * 2, 1.0)
                    else:
                        backoff = 0.05
                if writer is None:
                    self.dropped += 1  # receiver gone: drop now, retry the connection later
                    continue
                try:
                    loop.run_until_complete(self._write(writer, item))
                    self.sent += 1
                except (ConnectionError, OSError, ssl.SSLError):
                    self.dropped += 1
                    writer = None
            if writer is not None and not loop.run_until_complete(self._still_open(writer)):
                writer.close()
                writer = None
            writer = writer or loop.run_until_complete(self._connect())
            if writer is not None:
                with contextlib.suppress(ConnectionError, OSError, ssl.SSLError):
                    loop.run_until_complete(self._write(writer, protocol.encode_json(protocol.DONE, self._stats())))
                    writer.close()
                    loop.run_until_complete(writer.wait_closed())
        finally:
            loop.close()
