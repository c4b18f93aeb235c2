"""The benchmark side of online pre-check: receive APIs, check them in worker processes, write results.

A forward entry waits for its backward entry (which arrives during the
training's backward pass) so both are checked together; at the end of a
step, or when the model recomputes (``online_run_ut_recompute``), forwards
are checked alone. Checks run in spawned worker processes so the receiver
keeps reading. Results are the usual accuracy_checking_result/details
files, written API by API; ``online_summary_{timestamp}.json`` records how
many APIs each sender sent and dropped.
"""

from __future__ import annotations

import asyncio
import contextlib
import hmac
import logging
import os
import signal
import ssl
import stat
import time
from collections import defaultdict
from concurrent.futures import Future
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from msprobe.core.dump.reader import Dump
from msprobe.core.errors import UsageError
from msprobe.core.files import write_json_atomic
from msprobe.core.online import protocol
from msprobe.core.online.protocol import is_loopback
from msprobe.core.precheck.driver import load, select
from msprobe.core.precheck.results import ResultFiles
from msprobe.core.processes import worker_pool

logger = logging.getLogger(__name__)


def _check(runner_path: str, entries: dict, arrays: dict, name: str) -> Any:
    """Worker process: run_ut on one API from memory."""
    dump = Dump(Path("<online>"), "tensor", "L1", "", entries, arrays=arrays)
    return load(runner_path)(dump, "cpu", False).run(name)


@dataclass
class SenderStats:
    connections: int = 0
    done: bool = False
    sent: int = 0
    dropped: int = 0
    rank: int = 0


@dataclass
class Pending:
    step: int
    entries: dict
    arrays: dict = field(default_factory=dict)


def server_ssl_context(tls_path: str) -> ssl.SSLContext:
    """TLS 1.2+ with client certificates checked against ca.crt in tls_path."""
    folder = Path(tls_path)
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.minimum_version = ssl.TLSVersion.TLSv1_2
    context.load_cert_chain(folder / "server.crt", folder / "server.key")
    context.load_verify_locations(folder / "ca.crt")
    context.verify_mode = ssl.CERT_REQUIRED
    return context


@dataclass
class Limits:
    """What one receiver grants: all configurable (run_ut section), defaults safe for a shared cluster."""

    max_connections: int = 64
    max_frame: int = 256 << 20
    idle_timeout: float = 120.0  # seconds a connection may wait between frames or mid-frame
    max_waiting_forwards: int = 4096
    # Before a connection has shown the token it is nobody: few of them at once (the oldest makes room for
    # a newcomer), a short time to say HELLO, and a small first frame, so strangers hold neither the honest
    # senders' slots nor memory.
    max_unauthenticated: int = 8
    hello_timeout: float = 5.0


def check_exposure(host: str, tls_path: str | None, token: str | None, allow_plain_remote: bool) -> None:
    """Plain TCP with no token is for this machine only, unless the config says otherwise."""
    if not tls_path and token is None and not is_loopback(host) and not allow_plain_remote:
        raise UsageError(
            f"online run_ut would listen on {host} over plain TCP with no token: anyone who can reach it "
            "could add results or end the run. Set run_ut.tls_path (mutual TLS) or run_ut.auth_token_path, "
            "or run_ut.allow_plain_remote: true to accept that"
        )


class _RateLimitedLog:
    """The first few warnings of a kind, then one in a thousand: a flood of bad peers cannot flood the log."""

    def __init__(self, first: int = 20, every: int = 1000):
        self.first, self.every = first, every
        self.counts: dict[str, int] = defaultdict(int)

    def note(self, kind: str, message: str, *args: Any) -> None:
        self.counts[kind] += 1
        count = self.counts[kind]
        if count <= self.first or count % self.every == 0:
            suffix = f" ({count} so far)" if count > self.first else ""
            logger.warning(message + suffix, *args)


class _AcceptErrorFilter(logging.Filter):
    """asyncio logs each failed accept (out of file descriptors) with a traceback: keep one a minute."""

    def __init__(self) -> None:
        super().__init__()
        self.last = 0.0

    def filter(self, record: logging.LogRecord) -> bool:
        if "accept" not in record.getMessage():
            return True
        now = time.monotonic()
        if now - self.last < 60:
            return False
        self.last = now
        record.exc_info = None
        return True


class Receiver:
    def __init__(
        self,
        output_dir: str | Path,
        runner_path: str,
        rank_list: list[int] | None = None,
        white_list: list[str] | None = None,
        black_list: list[str] | None = None,
        recompute: bool = False,
        workers: int = 2,
        max_frame: int | None = None,
        token: str | None = None,
        limits: Limits | None = None,
        allow_plain_remote: bool = False,
        loopback_token: bool = True,
    ):
        self.limits = limits or Limits()
        if max_frame is not None:
            self.limits.max_frame = max_frame
        self.token = token
        self.allow_plain_remote = allow_plain_remote
        self.loopback_token = loopback_token
        self.token_file: Path | None = None  # the token this receiver made, when it made one
        self.log = _RateLimitedLog()
        self.refused_connections = 0
        self.evicted_forwards = 0
        self.interrupted = False
        self.files = ResultFiles(Path(output_dir))
        self.runner_path = runner_path
        self.rank_list = set(rank_list or [])
        self.white_list, self.black_list = white_list or [], black_list or []
        self.recompute = recompute
        self.max_frame = self.limits.max_frame
        self.pool = worker_pool(workers)
        self.pending: dict[tuple[int, str], Pending] = {}
        self.futures: list[Future] = []
        self.senders: dict[str, SenderStats] = {}
        self.open_connections = 0
        self.admitted = 0  # connections holding one of the max_connections slots
        self.strangers: dict[asyncio.StreamWriter, None] = {}  # connected, no token shown yet; oldest first
        self.dropped_strangers = 0
        self.stopped = asyncio.Event()
        self.rejected_frames = 0
        self.checked = 0

    # -- messages ----------------------------------------------------------------------------
    def on_api(self, message: protocol.ApiMessage) -> None:
        if self.rank_list and message.rank not in self.rank_list:
            return
        for name, entry in message.entries.items():
            if not isinstance(entry, dict):
                continue
            base = name.rsplit(".", 1)[0]
            key = (message.rank, base)
            if name.endswith(".forward"):
                self._flush_older(message.rank, message.step)
                if not select([name], self.white_list, self.black_list):
                    continue
                item = Pending(message.step, {name: entry}, dict(message.arrays))
                if self.recompute or not _needs_backward(entry):
                    self._submit(item, name)
                else:
                    self.pending[key] = item
                    self._evict_oldest()
            elif name.endswith(".backward") and key in self.pending:
                item = self.pending.pop(key)
                item.entries[name] = entry
                item.arrays.update(message.arrays)
                self._submit(item, f"{base}.forward")

    def _evict_oldest(self) -> None:
        """Forwards waiting for a backward are bounded: past the limit the oldest are dropped and counted."""
        while len(self.pending) > self.limits.max_waiting_forwards:
            self.pending.pop(next(iter(self.pending)))
            self.evicted_forwards += 1
            self.log.note("evict", "online run_ut: a forward waited too long for its backward and was dropped")

    def _flush_older(self, rank: int, step: int) -> None:
        """Forwards of a finished step will get no backward any more: check them alone."""
        for key in [k for k, v in self.pending.items() if k[0] == rank and v.step < step]:
            item = self.pending.pop(key)
            self._submit(item, f"{key[1]}.forward")

    def flush_all(self) -> None:
        for key in list(self.pending):
            item = self.pending.pop(key)
            self._submit(item, f"{key[1]}.forward")

    def _submit(self, item: Pending, name: str) -> None:
        future = self.pool.submit(_check, self.runner_path, item.entries, item.arrays, name)
        future.add_done_callback(self._write)
        self.futures.append(future)

    def _write(self, future: Future) -> None:
        try:
            outcome = future.result()
        except Exception as exc:
            logger.warning("online run_ut: a check failed in its worker: %s", exc)
            return
        self.files.write_api(outcome.name, outcome.forward, outcome.backward, outcome.message, outcome.details)
        self.checked += 1

    def on_done(self, sender: str, stats: dict) -> None:
        """``stats``: a DONE frame's counts, already checked (protocol.decode_done)."""
        record = self.senders.setdefault(sender, SenderStats())
        record.done = True
        record.sent, record.dropped, record.rank = stats["sent"], stats["dropped"], stats["rank"]
        if record.dropped:
            logger.warning("online run_ut: sender %s (rank %d) dropped %d APIs", sender, record.rank, record.dropped)
        self._maybe_stop()

    def _maybe_stop(self) -> None:
        if self.senders and all(s.done for s in self.senders.values()) and self.open_connections == 0:
            self.stopped.set()

    # -- TCP / TLS -----------------------------------------------------------------------------
    async def handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        peer = writer.get_extra_info("peername")
        sender = f"{peer}"
        authenticated = self.token is None  # mutual TLS or a loopback-only listener; else the HELLO's token
        if authenticated and not self._admit(peer):
            writer.close()
            return
        self.open_connections += 1
        if not authenticated:
            self._meet_stranger(writer)
        deadline = time.monotonic() + self.limits.hello_timeout
        try:
            while True:
                # a stranger's one frame may be a HELLO, small and soon; then the configured limits
                limit = self.max_frame if authenticated else protocol.MAX_HELLO
                timeout = self.limits.idle_timeout if authenticated else max(0.0, deadline - time.monotonic())
                try:
                    prefix = await self._read(reader, protocol.PREFIX.size, timeout)
                except asyncio.IncompleteReadError as exc:
                    if exc.partial:
                        raise
                    break  # the sender went away between frames
                kind, length = protocol.parse_prefix(prefix, limit)
                if kind == protocol.HELLO and length > protocol.MAX_HELLO:
                    raise protocol.ProtocolError(f"a HELLO of {length} bytes is over {protocol.MAX_HELLO}")
                if not authenticated and kind != protocol.HELLO:
                    raise protocol.ProtocolError("a frame before the HELLO that names this receiver's token")
                if not authenticated:
                    timeout = max(0.0, deadline - time.monotonic())
                payload = await self._read(reader, length, timeout)
                if kind == protocol.HELLO:
                    name, token = protocol.decode_hello(payload)
                    if self.token is not None and (token is None or not hmac.compare_digest(token, self.token)):
                        raise protocol.ProtocolError("wrong or missing token")
                    if not authenticated:
                        self.strangers.pop(writer, None)
                        if not self._admit(peer):
                            break
                        authenticated = True
                    sender = name or sender
                    self.senders.setdefault(sender, SenderStats()).connections += 1
                elif kind == protocol.API:
                    self.on_api(protocol.decode_api(payload))
                elif kind == protocol.DONE:
                    self.on_done(sender, protocol.decode_done(payload))
        except protocol.ProtocolError as exc:
            self.rejected_frames += 1
            self.log.note("frame", "online run_ut: %s sent a bad frame (%s); connection closed", peer, exc)
        except asyncio.TimeoutError:
            if authenticated:
                self.log.note("idle", "online run_ut: %s was idle too long; connection closed", peer)
            else:
                self.log.note("hello", "online run_ut: %s sent no HELLO in time; connection closed", peer)
        except (asyncio.IncompleteReadError, ConnectionError, OSError) as exc:
            self.log.note("cut", "online run_ut: %s disconnected mid-frame (%s)", peer, type(exc).__name__)
        except Exception as exc:  # what no decoder foresaw: this connection's frame is refused, the receiver goes on
            self.rejected_frames += 1
            self.log.note(
                "frame", "online run_ut: %s sent a frame that could not be read (%s); connection closed",
                peer, type(exc).__name__,
            )  # fmt: skip
        finally:
            if authenticated:
                self.admitted -= 1
            self.strangers.pop(writer, None)
            self.open_connections -= 1
            writer.close()
            with contextlib.suppress(Exception):
                await writer.wait_closed()
            self._maybe_stop()

    def _admit(self, peer: Any) -> bool:
        """A slot among max_connections for a connection known to be a sender, or a refusal that is counted."""
        if self.admitted >= self.limits.max_connections:
            self.refused_connections += 1
            self.log.note("connections", "online run_ut: %s refused: %d connections are open", peer, self.admitted)
            return False
        self.admitted += 1
        return True

    def _meet_stranger(self, writer: asyncio.StreamWriter) -> None:
        """A connection that has not shown the token yet. When max_unauthenticated are already waiting, the
        oldest is dropped: an honest sender says HELLO at once, so only a stalling one loses its place."""
        while len(self.strangers) >= self.limits.max_unauthenticated:
            oldest = next(iter(self.strangers))
            self.strangers.pop(oldest)
            self.dropped_strangers += 1
            oldest.transport.abort()
            self.log.note("strangers", "online run_ut: a connection without a HELLO made room for a newer one")
        self.strangers[writer] = None

    async def _read(self, reader: asyncio.StreamReader, size: int, timeout: float) -> bytes:
        """Exactly ``size`` bytes, or a timeout: a half-sent frame never holds a connection open for good."""
        return await asyncio.wait_for(reader.readexactly(size), timeout)

    def check_exposure(self, host: str, tls_path: str | None) -> None:
        check_exposure(host, tls_path, self.token, self.allow_plain_remote)

    async def serve_tcp(self, host: str, port: int, tls_path: str | None) -> None:
        self.check_exposure(host, tls_path)
        context = server_ssl_context(tls_path) if tls_path else None
        handshake = {"ssl_handshake_timeout": self.limits.hello_timeout} if context else {}
        server = await asyncio.start_server(self.handle, host, port, ssl=context, start_serving=False, **handshake)
        port = server.sockets[0].getsockname()[1]
        how = "TLS" if context else "plain TCP"
        token_file = None
        if context is None and self.token is None and self.loopback_token and is_loopback(host):
            # any process of this machine could otherwise send: only this user's may, through a file they read.
            # Written before listening, so a sender that gets in always finds it.
            self.token, token_file = protocol.write_loopback_token(port)
            how += f", token in {token_file}"
        elif self.token:
            how += ", token"
        try:
            async with server:
                await server.start_serving()
                self.token_file = token_file  # shown once connections are taken
                logger.warning("online run_ut: listening on %s:%d (%s)", host, port, how)
                await self.stopped.wait()
        finally:
            if token_file is not None:
                token_file.unlink(missing_ok=True)

    # -- shared directory ----------------------------------------------------------------------
    async def serve_directory(self, folder: str | Path, poll_seconds: float = 0.05) -> None:
        """Frames written by senders as NAME.msprobe (renamed into place when complete).

        A file that is no frame (short, corrupt, too large) or no regular file
        (a FIFO would block the reader) goes to ``rejected/`` with one log line,
        so a restart does not meet it again.
        """
        folder = Path(folder)
        folder.mkdir(parents=True, exist_ok=True)
        while not self.stopped.is_set():
            for path in sorted(folder.glob("*.msprobe")):
                if self.stopped.is_set():
                    break
                sender = path.name.split("_", 1)[0]
                try:
                    data = self._read_frame_file(path)
                    kind, length = protocol.parse_prefix(data, self.max_frame)
                    payload = data[protocol.PREFIX.size :]
                    if len(payload) != length:
                        raise protocol.ProtocolError("file is cut short")
                    if kind == protocol.API:
                        message = protocol.decode_api(payload)
                        self.senders.setdefault(sender, SenderStats())  # known once a frame of it reads
                        self.on_api(message)
                    elif kind == protocol.DONE:
                        counts = protocol.decode_done(payload)
                        self.senders.setdefault(sender, SenderStats())
                        self.on_done(sender, counts)
                except protocol.ProtocolError as exc:
                    self.rejected_frames += 1
                    self._reject(folder, path, str(exc))
                    continue
                except Exception as exc:  # what no decoder foresaw: set aside, or every restart would meet it again
                    self.rejected_frames += 1
                    self._reject(folder, path, f"could not be read: {type(exc).__name__}")
                    continue
                path.unlink(missing_ok=True)
            await asyncio.sleep(poll_seconds)

    def _read_frame_file(self, path: Path) -> bytes:
        try:
            info = os.lstat(path)
        except FileNotFoundError:
            raise protocol.ProtocolError("vanished") from None
        if not stat.S_ISREG(info.st_mode):
            raise protocol.ProtocolError("not a regular file")
        if info.st_size > self.max_frame + protocol.PREFIX.size:
            raise protocol.ProtocolError(f"{info.st_size} bytes is over the frame limit of {self.max_frame}")
        try:
            with open(path, "rb") as handle:  # lstat said regular: opening cannot block
                return handle.read(self.max_frame + protocol.PREFIX.size + 1)
        except OSError as exc:
            raise protocol.ProtocolError(f"cannot be read ({exc.strerror})") from None

    def _reject(self, folder: Path, path: Path, reason: str) -> None:
        rejected = folder / "rejected"
        try:
            rejected.mkdir(mode=0o750, exist_ok=True)
            os.replace(path, rejected / path.name)
            where = f"moved to {rejected}"
        except OSError as exc:
            with contextlib.suppress(OSError):
                path.unlink()
            where = f"removed ({exc.strerror} when moving it)"
        self.log.note("file", "online run_ut: %s is not a valid frame (%s); %s", path.name, reason, where)

    # -- running ------------------------------------------------------------------------------
    def run(
        self, host: str | None = None, port: int | None = None, tls_path: str | None = None, nfs_path: str | None = None
    ) -> dict:
        async def main() -> None:
            loop = asyncio.get_running_loop()
            for number in (signal.SIGTERM, signal.SIGINT):
                with contextlib.suppress(NotImplementedError, RuntimeError):
                    loop.add_signal_handler(number, self._interrupt)
            if nfs_path:
                await self.serve_directory(nfs_path)
            else:
                await self.serve_tcp(host or "127.0.0.1", int(port or 0), tls_path)

        if not nfs_path:
            self.check_exposure(host or "127.0.0.1", tls_path)  # before anything starts
        accept_filter = _AcceptErrorFilter()
        logging.getLogger("asyncio").addFilter(accept_filter)
        try:
            asyncio.run(main())
        except BaseException:
            if self.checked == 0 and not self.futures:  # refused at the start: no empty result files behind
                self.files.discard_if_empty()
            raise
        finally:
            logging.getLogger("asyncio").removeFilter(accept_filter)
            if self.interrupted:  # stopped by a signal: within seconds, leaving queued checks undone
                self.pool.shutdown(wait=True, cancel_futures=True)
            else:
                self.flush_all()
                for future in list(self.futures):
                    with contextlib.suppress(Exception):
                        future.result()
                self.pool.shutdown()
        return self.write_summary()

    def _interrupt(self) -> None:
        self.interrupted = True
        self.stopped.set()

    def write_summary(self) -> dict:
        summary = {
            "checked": self.checked,
            "rejected_frames": self.rejected_frames,
            "refused_connections": self.refused_connections,
            "dropped_unauthenticated": self.dropped_strangers,
            "evicted_forwards": self.evicted_forwards,
            "interrupted": self.interrupted,
            "senders": {name: vars(stats) for name, stats in self.senders.items()},
            "dropped": sum(s.dropped for s in self.senders.values()),
        }
        stamp = self.files.result.stem.rsplit("_", 1)[-1]
        path = self.files.result.parent / f"online_summary_{stamp}.json"
        write_json_atomic(path, summary)
        return summary


def _needs_backward(entry: dict) -> bool:
    def grad(value: Any) -> bool:
        if isinstance(value, dict):
            return bool(value.get("requires_grad")) if "dtype" in value else any(map(grad, value.values()))
        if isinstance(value, list):
            return any(map(grad, value))
        return False

    return grad(entry.get("input_args")) or grad(entry.get("input_kwargs"))
