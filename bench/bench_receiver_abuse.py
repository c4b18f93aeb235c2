"""The online receiver under abuse: one honest sender beside 200 hostile loopback connections.

    python bench/bench_receiver_abuse.py [--hostile 200] [--apis 200]

The receiver (``msprobe -f pytorch run_ut`` with is_online) listens on loopback, twice: with the token it
makes for its own user (the default), and with a configured one (``auth_token_path``). The honest sender
connects first and streams ``--apis`` small ``torch.add`` calls; meanwhile ``--hostile`` connections send
garbage, half frames that then stall, length prefixes of a terabyte, HELLOs announcing 199 MiB, and
connections that say nothing and reconnect as soon as they are dropped. Prints how many honest APIs were
checked (all must be) and the receiver's peak resident memory against a stated bound. Traffic goes to
127.0.0.1 only, and every loop is bounded in count and time.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import socket
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import numpy as np

from msprobe.core.online import protocol
from msprobe.core.online.sender import OnlineSender

RSS_BOUND_MB = 256  # the receiver's own peak, workers not counted
RECEIVER_STOPS_WITHIN = float(os.environ.get("MSPROBE_BENCH_STOP_SECONDS", "300"))


def _api(index: int) -> protocol.ApiMessage:
    stem = f"Torch.add.{index}.forward"
    arrays = {f"{stem}.input.{n}.pt": np.full(8, float(n + index), dtype=np.float32) for n in range(2)}
    arrays[f"{stem}.output.0.pt"] = arrays[f"{stem}.input.0.pt"] + arrays[f"{stem}.input.1.pt"]

    def summary(name: str) -> dict:
        return {"type": "torch.Tensor", "dtype": "torch.float32", "shape": [8], "requires_grad": False,
                "data_name": name}  # fmt: skip

    entry = {
        "input_args": [summary(f"{stem}.input.0.pt"), summary(f"{stem}.input.1.pt")],
        "input_kwargs": {},
        "output": [summary(f"{stem}.output.0.pt")],
    }
    return protocol.ApiMessage(0, 0, {stem: entry}, arrays)


def _hostile(port: int, kind: int, seconds: float) -> None:
    deadline = time.monotonic() + seconds
    with socket.socket() as connection:
        connection.settimeout(seconds)
        try:
            connection.connect(("127.0.0.1", port))
            if kind == 0:  # garbage
                connection.sendall(random.randbytes(4096))
            elif kind == 1:  # a frame header promising a megabyte, a few bytes, then silence
                connection.sendall(
                    protocol.PREFIX.pack(protocol.MAGIC, protocol.VERSION, protocol.API, 1 << 20) + b"xx"
                )
                while time.monotonic() < deadline and connection.recv(1):
                    pass
            elif kind == 2:  # a length prefix of a terabyte
                connection.sendall(protocol.PREFIX.pack(protocol.MAGIC, protocol.VERSION, protocol.API, 1 << 40))
                connection.recv(1)
            else:  # a HELLO of 199 MiB, sent for as long as the receiver reads it
                connection.sendall(protocol.PREFIX.pack(protocol.MAGIC, protocol.VERSION, protocol.HELLO, 199 << 20))
                chunk = b"x" * (1 << 20)
                for _ in range(199):
                    if time.monotonic() >= deadline:
                        break
                    connection.sendall(chunk)
        except OSError:
            pass  # refused or closed by the receiver: what it should do


def _squatter(port: int, seconds: float) -> None:
    """Connects, says nothing, and reconnects as soon as it is dropped: slots held as long as it can."""
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        with socket.socket() as connection:
            connection.settimeout(max(0.1, deadline - time.monotonic()))
            try:
                connection.connect(("127.0.0.1", port))
                connection.recv(1)
            except OSError:
                time.sleep(0.01)


def _peak_rss_mb(pid: int) -> float:
    with open(f"/proc/{pid}/status", encoding="utf-8") as handle:
        for line in handle:
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) / 1024
    return float("nan")


def _scenario(hostile: int, apis: int, token: str | None) -> None:
    folder = Path(tempfile.mkdtemp(prefix="msprobe_abuse_"))
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    section = {"is_online": True, "host": "127.0.0.1", "port": port, "rank_list": [0], "tls_path": "",
               "idle_timeout": 5, "max_connections": 64}  # fmt: skip
    if token:
        (folder / "token").write_text(token)
        section["auth_token_path"] = str(folder / "token")
    (folder / "recv.json").write_text(json.dumps({"task": "run_ut", "run_ut": section}))
    receiver = subprocess.Popen(
        [sys.executable, "-m", "msprobe.cli.main", "-f", "pytorch", "run_ut", "-config", str(folder / "recv.json"),
         "-o", str(folder / "out")],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip
    deadline = time.time() + 60
    while time.time() < deadline:
        with socket.socket() as probe:
            if probe.connect_ex(("127.0.0.1", port)) == 0:
                break
        time.sleep(0.2)
    sender = OnlineSender(rank=0, host="127.0.0.1", port=port, queue_size=apis + 1, block_seconds=30, token=token)
    sender.send(_api(0))  # the honest connection is open before the flood
    time.sleep(0.5)
    kinds = 5
    attackers = [
        threading.Thread(target=_squatter, args=(port, 10.0), daemon=True)
        if index % kinds == 4
        else threading.Thread(target=_hostile, args=(port, index % kinds, 10.0), daemon=True)
        for index in range(hostile)
    ]
    for thread in attackers:
        thread.start()
    for index in range(1, apis):
        sender.send(_api(index))
    for thread in attackers:
        thread.join(15)
    peak = _peak_rss_mb(receiver.pid)
    sender.close()
    try:
        _stdout, stderr = receiver.communicate(timeout=RECEIVER_STOPS_WITHIN)
    except subprocess.TimeoutExpired:
        receiver.kill()
        _stdout, stderr = receiver.communicate()
        raise SystemExit(f"the receiver did not stop after the honest sender's DONE:\n{stderr[-3000:]}") from None
    results = next((folder / "out").glob("accuracy_checking_result_*.csv"))
    checked = sum(1 for line in results.read_text(encoding="utf-8-sig").splitlines()[1:] if line.strip())
    summary = json.loads(next((folder / "out").glob("online_summary_*.json")).read_text())
    print(f"receiver {'with a configured token' if token else 'with the token it makes (default)'}:")
    print(f"  honest APIs checked: {checked}/{apis} (sender dropped {sender.dropped})")
    print(
        f"  hostile connections: {hostile}; refused {summary['refused_connections']}, "
        f"bad frames {summary['rejected_frames']}, dropped before a HELLO {summary['dropped_unauthenticated']}"
    )
    print(
        f"  receiver peak RSS: {peak:.0f} MB (bound {RSS_BOUND_MB} MB): {'within' if peak < RSS_BOUND_MB else 'OVER'}"
    )
    if receiver.returncode != 0:
        print(stderr[-2000:])
    if os.environ.get("MSPROBE_BENCH_KEEP") is None:
        import shutil

        shutil.rmtree(folder, ignore_errors=True)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--hostile", type=int, default=200)
    parser.add_argument("--apis", type=int, default=200)
    args = parser.parse_args()
    _scenario(args.hostile, args.apis, None)
    _scenario(args.hostile, args.apis, "bench-" + os.urandom(8).hex())


if __name__ == "__main__":
    main()
