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
import json
import logging
import os
import signal
import ssl
from concurrent.futures import Future
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from msprobe.core.dump.reader import Dump
from msprobe.core.online import protocol
from msprobe.core.precheck.driver import _load, select
from msprobe.core.precheck.results import ResultFiles
from msprobe.core.processes import worker_pool

logger = logging.getLogger(__name__)


def _check(runner_path: str, entries: dict, arrays: dict, name: str) -> Any:
    """Worker process: run_ut on one API from memory."""
    dump = Dump(Path("<online>"), "tensor", "L1", "", entries, arrays=arrays)
    return _load(runner_path)(dump, "cpu", False).run(name)


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
        max_frame: int = protocol.DEFAULT_MAX_FRAME,
    ):
        self.files = ResultFiles(Path(output_dir))
        self.runner_path = runner_path
        self.rank_list = set(rank_list or [])
        self.white_list, self.black_list = white_list or [], black_list or []
        self.recompute = recompute
        self.max_frame = max_frame
        self.pool = worker_pool(workers)
        self.pending: dict[tuple[int, str], Pending] = {}
        self.futures: list[Future] = []
        self.senders: dict[str, SenderStats] = {}
        self.open_connections = 0
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
            elif name.endswith(".backward") and key in self.pending:
                item = self.pending.pop(key)
                item.entries[name] = entry
                item.arrays.update(message.arrays)
                self._submit(item, f"{base}.forward")

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
        record = self.senders.setdefault(sender, SenderStats())
        record.done = True
        record.sent = int(stats.get("sent", 0))
        record.dropped = int(stats.get("dropped", 0))
        record.rank = int(stats.get("rank", 0))
        if record.dropped:
            logger.warning("online run_ut: sender %s (rank %d) dropped %d APIs", sender, record.rank, record.dropped)
        self._maybe_stop()

    def _maybe_stop(self) -> None:
        if self.senders and all(s.done for s in self.senders.values()) and self.open_connections == 0:
            self.stopped.set()

    # -- TCP / TLS -----------------------------------------------------------------------------
    async def handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        peer = writer.get_extra_info("peername")
        self.open_connections += 1
        sender = f"{peer}"
        try:
            while True:
                try:
                    prefix = await reader.readexactly(protocol.PREFIX.size)
                except asyncio.IncompleteReadError:
                    break  # the sender went away between frames
                kind, length = protocol.parse_prefix(prefix, self.max_frame)
                payload = await reader.readexactly(length)
                if kind == protocol.HELLO:
                    sender = str(protocol.decode_json(payload).get("sender", sender))
                    self.senders.setdefault(sender, SenderStats()).connections += 1
                elif kind == protocol.API:
                    self.on_api(protocol.decode_api(payload))
                elif kind == protocol.DONE:
                    self.on_done(sender, protocol.decode_json(payload))
        except protocol.ProtocolError as exc:
            self.rejected_frames += 1
            logger.warning("online run_ut: %s sent a bad frame (%s); connection closed", peer, exc)
        except (asyncio.IncompleteReadError, ConnectionError) as exc:
            logger.warning("online run_ut: %s disconnected mid-frame (%s)", peer, type(exc).__name__)
        finally:
            self.open_connections -= 1
            writer.close()
            with contextlib.suppress(Exception):
                await writer.wait_closed()
            self._maybe_stop()

    async def serve_tcp(self, host: str, port: int, tls_path: str | None) -> None:
        context = server_ssl_context(tls_path) if tls_path else None
        server = await asyncio.start_server(self.handle, host, port, ssl=context)
        logger.warning("online run_ut: listening on %s:%d (%s)", host, port, "TLS" if context else "plain TCP")
        async with server:
            await self.stopped.wait()

    # -- shared directory ----------------------------------------------------------------------
    async def serve_directory(self, folder: str | Path, poll_seconds: float = 0.05) -> None:
        """Frames written by senders as NAME.msprobe (renamed into place when complete)."""
        folder = Path(folder)
        folder.mkdir(parents=True, exist_ok=True)
        while not self.stopped.is_set():
            for path in sorted(folder.glob("*.msprobe")):
                sender = path.name.split("_", 1)[0]
                try:
                    data = path.read_bytes()
                    kind, length = protocol.parse_prefix(data[: protocol.PREFIX.size], self.max_frame)
                    payload = data[protocol.PREFIX.size :]
                    if len(payload) != length:
                        raise protocol.ProtocolError("file is cut short")
                    self.senders.setdefault(sender, SenderStats())
                    if kind == protocol.API:
                        self.on_api(protocol.decode_api(payload))
                    elif kind == protocol.DONE:
                        self.on_done(sender, protocol.decode_json(payload))
                except protocol.ProtocolError as exc:
                    self.rejected_frames += 1
                    logger.warning("online run_ut: %s is not a valid frame (%s); skipped", path.name, exc)
                path.unlink(missing_ok=True)
            await asyncio.sleep(poll_seconds)

    # -- running ------------------------------------------------------------------------------
    def run(
        self, host: str | None = None, port: int | None = None, tls_path: str | None = None, nfs_path: str | None = None
    ) -> dict:
        async def main() -> None:
            loop = asyncio.get_running_loop()
            for number in (signal.SIGTERM, signal.SIGINT):
                with contextlib.suppress(NotImplementedError, RuntimeError):
                    loop.add_signal_handler(number, self.stopped.set)
            if nfs_path:
                await self.serve_directory(nfs_path)
            else:
                await self.serve_tcp(host or "127.0.0.1", int(port or 0), tls_path)

        try:
            asyncio.run(main())
        finally:
            self.flush_all()
            for future in list(self.futures):
                with contextlib.suppress(Exception):
                    future.result()
            self.pool.shutdown()
        return self.write_summary()

    def write_summary(self) -> dict:
        summary = {
            "checked": self.checked,
            "rejected_frames": self.rejected_frames,
            "senders": {name: vars(stats) for name, stats in self.senders.items()},
            "dropped": sum(s.dropped for s in self.senders.values()),
        }
        stamp = self.files.result.stem.rsplit("_", 1)[-1]
        path = self.files.result.parent / f"online_summary_{stamp}.json"
        path.write_text(json.dumps(summary, indent=1))
        os.chmod(path, 0o640)
        return summary


def _needs_backward(entry: dict) -> bool:
    def grad(value: Any) -> bool:
        if isinstance(value, dict):
            return bool(value.get("requires_grad")) if "dtype" in value else any(map(grad, value.values()))
        if isinstance(value, list):
            return any(map(grad, value))
        return False

    return grad(entry.get("input_args")) or grad(entry.get("input_kwargs"))
