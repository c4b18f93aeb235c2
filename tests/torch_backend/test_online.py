"""Online pre-check on loopback: streaming, TLS, faults, two senders, the shared-directory mode."""

import csv
import json
import signal
import socket
import struct
import subprocess
import sys
import time

import numpy as np
import pytest
from click.testing import CliRunner
from ports import unused_port

from models import train_mixed_net
from msprobe.cli.main import cli
from msprobe.core.online import protocol
from msprobe.core.online.sender import OnlineSender
from msprobe.pytorch import PrecisionDebugger


def free_port():
    return unused_port()


def start_receiver(tmp_path, name, port=None, tls_path="", nfs_path=None, extra=None):
    section = {"is_online": True, "host": "127.0.0.1", "port": port, "rank_list": [0], "tls_path": tls_path}
    section.update(extra or {})
    if nfs_path:
        section.update({"nfs_path": str(nfs_path), "port": None})
    config = tmp_path / f"{name}.json"
    config.write_text(json.dumps({"task": "run_ut", "run_ut": section}))
    process = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "msprobe.cli.main",
            "-f",
            "pytorch",
            "run_ut",
            "-config",
            str(config),
            "-o",
            str(tmp_path / name),
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    if port:
        deadline = time.time() + 60
        while time.time() < deadline:
            with socket.socket() as s:
                if s.connect_ex(("127.0.0.1", port)) == 0:
                    break
            time.sleep(0.2)
    return process


def wait_until(condition, seconds: float = 60.0) -> None:
    """Wait on state, not on time: ``condition()`` becomes true, or the test fails after ``seconds``."""
    deadline = time.monotonic() + seconds
    while not condition():
        assert time.monotonic() < deadline, "the state waited for never came"
        time.sleep(0.02)


def read_stderr_until(process, text: str, count: int, seconds: float = 60.0) -> str:
    """What the process has written to stderr once ``text`` appears ``count`` times: the receiver's log is
    the state waited on. Read from the file descriptor, so no line sits unseen in a Python buffer."""
    import os
    import select

    seen = ""
    deadline = time.monotonic() + seconds
    while seen.count(text) < count:
        assert time.monotonic() < deadline, f"{text!r} was written {seen.count(text)} times: {seen[-2000:]}"
        ready, _, _ = select.select([process.stderr], [], [], 0.1)
        if ready:
            chunk = os.read(process.stderr.fileno(), 65536)
            assert chunk, f"the process ended before writing {text!r} {count} times: {seen[-2000:]}"
            seen += chunk.decode(errors="replace")
    return seen


def has_accepted(pid: int, port: int, peer_port: int) -> bool:
    """Whether the process holds its end of the connection from ``peer_port``: the kernel queues a connection
    before the program accepts it, and gives the socket an inode and a file descriptor only once it does."""
    from pathlib import Path

    inodes = set()
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        for line in Path(table).read_text().splitlines()[1:]:
            fields = line.split()
            local, remote, inode = fields[1], fields[2], fields[9]
            if int(local.rsplit(":", 1)[1], 16) == port and int(remote.rsplit(":", 1)[1], 16) == peer_port:
                inodes.add(f"socket:[{inode}]")
    return any(str(fd.readlink()) in inodes for fd in Path(f"/proc/{pid}/fd").iterdir())


def train_online(tmp_path, port=None, tls_path="", nfs_path=None, steps=1, extra=None):
    section = {"online_run_ut": True, "host": "127.0.0.1", "port": port, "tls_path": tls_path}
    section.update(extra or {})
    if nfs_path:
        section.update({"nfs_path": str(nfs_path), "port": None})
    config = tmp_path / "send.json"
    config.write_text(
        json.dumps(
            {
                "task": "tensor",
                "dump_path": str(tmp_path / "unused"),
                "level": "L1",
                "step": list(range(steps)),
                "tensor": section,
            }
        )
    )
    made = {}

    def make(model):
        made["debugger"] = PrecisionDebugger(config_path=str(config), model=model)
        return made["debugger"]

    train_mixed_net(make, steps=steps)
    made["debugger"].finish()
    return made["debugger"]._hooks.sender


def results(folder):
    with open(next(folder.glob("accuracy_checking_result_*.csv")), encoding="utf-8-sig") as handle:
        return {(r["API Name"], r["Forward Test Success"], r["Backward Test Success"]) for r in csv.DictReader(handle)}


@pytest.fixture(scope="module")
def offline(tmp_path_factory):
    """run_ut on a tensor dump of the same training step, for reference."""
    folder = tmp_path_factory.mktemp("offline")
    train_mixed_net(
        lambda model: PrecisionDebugger(
            task="tensor", level="L1", dump_path=str(folder / "dump"), model=model, step=[0]
        ),
        steps=1,
    )
    runner = CliRunner().invoke(
        cli,
        ["-f", "pytorch", "run_ut", "-api_info", str(folder / "dump/step0/rank/dump.json"), "-o", str(folder / "ut")],
    )
    assert runner.exit_code == 0, runner.output
    return results(folder / "ut")


def test_plain_tcp_matches_offline_run_ut(tmp_path, offline):
    port = free_port()
    receiver = start_receiver(tmp_path, "recv", port)
    sender = train_online(tmp_path, port)
    assert receiver.wait(timeout=120) == 0, receiver.stderr.read()[-2000:]
    assert sender.dropped == 0 and sender.sent > 50
    assert results(tmp_path / "recv") == offline
    summary = json.loads(next((tmp_path / "recv").glob("online_summary_*.json")).read_text())
    assert summary["dropped"] == 0 and len(summary["senders"]) == 1


def make_certificates(folder, name="ca"):
    folder.mkdir(parents=True, exist_ok=True)

    def run(*args):
        subprocess.run(["openssl", *args], check=True, capture_output=True, cwd=folder)

    run(
        "req",
        "-x509",
        "-newkey",
        "rsa:2048",
        "-nodes",
        "-keyout",
        "ca.key",
        "-out",
        "ca.crt",
        "-days",
        "1",
        "-subj",
        f"/CN={name}",
    )
    for role in ("server", "client"):
        run(
            "req",
            "-newkey",
            "rsa:2048",
            "-nodes",
            "-keyout",
            f"{role}.key",
            "-out",
            f"{role}.csr",
            "-subj",
            f"/CN=msprobe-{role}",
        )
        run(
            "x509",
            "-req",
            "-in",
            f"{role}.csr",
            "-CA",
            "ca.crt",
            "-CAkey",
            "ca.key",
            "-CAcreateserial",
            "-out",
            f"{role}.crt",
            "-days",
            "1",
        )
    return folder


def test_tls_matches_offline_and_a_wrong_certificate_is_refused(tmp_path, offline):
    certificates = make_certificates(tmp_path / "tls")
    port = free_port()
    receiver = start_receiver(tmp_path, "recv", port, tls_path=str(certificates))
    stranger = make_certificates(tmp_path / "other", name="another-ca")
    refused = train_online(tmp_path, port, tls_path=str(stranger))
    assert refused.sent == 0 and refused.dropped > 50
    sender = train_online(tmp_path, port, tls_path=str(certificates))
    assert receiver.wait(timeout=120) == 0, receiver.stderr.read()[-2000:]
    assert sender.dropped == 0
    assert results(tmp_path / "recv") == offline


def test_receiver_killed_and_restarted_mid_run(tmp_path):
    port = free_port()
    first = start_receiver(tmp_path, "first", port)
    sender = OnlineSender(rank=0, port=port, block_seconds=0.05)
    message = protocol.ApiMessage(0, 0, {"Torch.abs.0.forward": {
        "input_args": [{"type": "torch.Tensor", "dtype": "torch.float32", "shape": [3], "data_name": "a.pt"}],
        "input_kwargs": {}}}, {"a.pt": np.array([1.0, -2.0, 3.0], np.float32)})  # fmt: skip
    for _ in range(5):
        sender.send(message)
    wait_until(lambda: sender.sent == 5)  # all five reached the first receiver
    first.send_signal(signal.SIGKILL)
    first.wait(timeout=30)
    for _ in range(5):  # the receiver is gone: these are dropped by the sender's thread, never queued for good
        assert sender.send(message) is True  # the training's call returns at once: the queue takes it
    wait_until(lambda: sender.sent + sender.dropped == 10)  # each taken from the queue: none holds it up
    second = start_receiver(tmp_path, "second", port)
    for _ in range(5):
        sender.send(message)
    sender.close()
    assert second.wait(timeout=120) == 0, second.stderr.read()[-2000:]
    assert sender.dropped > 0 and sender.sent >= 5
    summary = json.loads(next((tmp_path / "second").glob("online_summary_*.json")).read_text())
    assert summary["dropped"] == sender.dropped and summary["checked"] >= 1


def test_garbage_and_oversized_frames_are_refused_and_the_receiver_goes_on(tmp_path):
    port = free_port()
    receiver = start_receiver(tmp_path, "recv", port)
    with socket.create_connection(("127.0.0.1", port)) as raw:
        raw.sendall(b"GET / HTTP/1.1\r\n\r\n" + b"x" * 64)
    with socket.create_connection(("127.0.0.1", port)) as raw:
        raw.sendall(protocol.PREFIX.pack(protocol.MAGIC, protocol.VERSION, protocol.API, 1 << 40))
    with socket.create_connection(("127.0.0.1", port)) as raw:  # a sender that dies mid-frame
        raw.sendall(protocol.PREFIX.pack(protocol.MAGIC, protocol.VERSION, protocol.API, 1000) + b"\x00" * 10)
    with socket.create_connection(("127.0.0.1", port)) as raw:  # a well-framed lie
        payload = struct.pack(">I", 5) + b"{oops"
        raw.sendall(protocol.frame(protocol.API, payload))
    logged = read_stderr_until(receiver, "bad frame", 2)  # the garbage is refused before the senders come
    two = [OnlineSender(rank=0, port=port), OnlineSender(rank=0, port=port)]  # two senders at once
    message = protocol.ApiMessage(0, 0, {"Torch.abs.0.forward": {
        "input_args": [{"type": "torch.Tensor", "dtype": "torch.float32", "shape": [2], "data_name": "a.pt"}],
        "input_kwargs": {}}}, {"a.pt": np.array([1.0, -2.0], np.float32)})  # fmt: skip
    for sender in two:
        sender.send(message)
    for sender in two:
        sender.close()
    assert receiver.wait(timeout=120) == 0
    summary = json.loads(next((tmp_path / "recv").glob("online_summary_*.json")).read_text())
    assert summary["rejected_frames"] >= 2 and len(summary["senders"]) == 2 and summary["checked"] == 2
    assert "bad frame" in logged + receiver.stderr.read()


def test_shared_directory_mode(tmp_path, offline):
    shared = tmp_path / "shared"
    receiver = start_receiver(tmp_path, "recv", nfs_path=shared)
    sender = train_online(tmp_path, nfs_path=shared)
    assert receiver.wait(timeout=120) == 0, receiver.stderr.read()[-2000:]
    assert sender.dropped == 0 and not list(shared.glob("*.tmp"))
    assert results(tmp_path / "recv") == offline


def test_sigterm_stops_the_shared_folder_receiver_within_seconds_even_with_a_fifo(tmp_path):
    import os
    import signal

    shared = tmp_path / "shared"
    shared.mkdir()
    os.mkfifo(shared / "x_000000001.msprobe")  # used to block the receiver's read for good
    process = start_receiver(tmp_path, "fifo", nfs_path=shared)
    deadline = time.time() + 60
    while not (shared / "rejected" / "x_000000001.msprobe").exists() and time.time() < deadline:
        time.sleep(0.1)
    assert (shared / "rejected" / "x_000000001.msprobe").exists()  # moved aside, not read
    process.send_signal(signal.SIGTERM)
    process.wait(timeout=30)  # a receiver stuck on the FIFO would not end: the wait would time out
    assert "Traceback" not in process.stderr.read()


def test_a_token_receiver_serves_a_sender_with_the_token(tmp_path, offline):
    """The token goes in the HELLO frame; the results are those of a receiver without one."""
    token = tmp_path / "token"
    token.write_text("0123456789abcdef\n")
    port = free_port()
    process = start_receiver(tmp_path, "tok", port=port, extra={"auth_token_path": str(token)})
    train_online(tmp_path, port=port, extra={"auth_token_path": str(token)})
    _stdout, stderr = process.communicate(timeout=120)
    assert process.returncode == 0, stderr
    assert results(tmp_path / "tok") == offline


def test_sigterm_stops_the_tcp_receiver_within_seconds_with_a_peer_stalled_mid_frame(tmp_path):
    import signal

    from msprobe.core.online import protocol

    port = free_port()
    process = start_receiver(tmp_path, "stalled", port=port)
    with socket.create_connection(("127.0.0.1", port)) as peer:
        # an admitted sender (a HELLO with the token a loopback receiver leaves for its user), then half a frame
        hello = {"name": "stalled", "token": protocol.read_loopback_token(port)}
        peer.sendall(protocol.encode_json(protocol.HELLO, hello))
        peer.sendall(protocol.PREFIX.pack(protocol.MAGIC, protocol.VERSION, protocol.API, 1 << 20) + b"half")
        mine = peer.getsockname()[1]
        wait_until(lambda: has_accepted(process.pid, port, mine))  # it reads the half frame, and waits for the rest
        process.send_signal(signal.SIGTERM)
        process.wait(timeout=30)  # a receiver held by the stalled peer would not end: the wait would time out
    summary = json.loads(next((tmp_path / "stalled").glob("online_summary_*.json")).read_text())
    assert summary["interrupted"] is True and summary["rejected_frames"] == 0  # stalled, not refused


def test_a_receiver_refused_at_start_leaves_no_result_files(tmp_path):
    config = tmp_path / "recv.json"
    section = {"is_online": True, "host": "0.0.0.0", "port": 29999, "rank_list": [0], "tls_path": ""}
    config.write_text(json.dumps({"task": "run_ut", "run_ut": section}))
    result = CliRunner().invoke(cli, ["-f", "pytorch", "run_ut", "-config", str(config), "-o", str(tmp_path / "out")])
    assert result.exit_code == 2 and "plain TCP with no token" in result.output
    assert not (tmp_path / "out").exists() or not any((tmp_path / "out").iterdir())  # no header-only CSVs
