import io
import json
import socket
import struct
import threading
import time

import numpy as np
import pytest

from msprobe.core.online import protocol
from msprobe.core.online.sender import OnlineSender


def test_round_trip_keeps_shapes_and_dtypes():
    message = protocol.ApiMessage(
        1,
        3,
        {"Torch.abs.0.forward": {"input_args": []}},
        {"a.pt": np.float32(2.5) * np.ones(()), "b.pt": np.arange(6, dtype=np.int64).reshape(2, 3)},
    )
    data = protocol.encode_api(message)
    kind, length = protocol.parse_prefix(data[: protocol.PREFIX.size], protocol.DEFAULT_MAX_FRAME)
    decoded = protocol.decode_api(data[protocol.PREFIX.size :])
    assert kind == protocol.API and length == len(data) - protocol.PREFIX.size
    assert (decoded.rank, decoded.step) == (1, 3) and decoded.arrays["a.pt"].shape == ()
    assert np.array_equal(decoded.arrays["b.pt"], message.arrays["b.pt"])


def test_a_pickled_array_is_refused_not_executed():
    buffer = io.BytesIO()
    np.save(buffer, np.array([{"payload": "object"}], dtype=object), allow_pickle=True)
    blob = buffer.getvalue()
    header = json.dumps({"rank": 0, "step": 0, "entries": {}, "blobs": {"x.pt": len(blob)}}).encode()
    with pytest.raises(protocol.ProtocolError, match="malformed API frame"):
        protocol.decode_api(struct.pack(">I", len(header)) + header + blob)


@pytest.mark.parametrize(
    "prefix",
    [
        b"XXXX" + bytes(10),
        protocol.PREFIX.pack(protocol.MAGIC, 9, 2, 1),
        protocol.PREFIX.pack(protocol.MAGIC, 1, 2, 1 << 40),
    ],
)
def test_foreign_and_oversized_frames(prefix):
    with pytest.raises(protocol.ProtocolError):
        protocol.parse_prefix(prefix, protocol.DEFAULT_MAX_FRAME)


def _frames(connection: socket.socket) -> list[int]:
    """The kinds of the frames read from a connection until its end."""
    stream = connection.makefile("rb")
    kinds = []
    while prefix := stream.read(protocol.PREFIX.size):
        kind, length = protocol.parse_prefix(prefix, 1 << 20)
        stream.read(length)
        kinds.append(kind)
    return kinds


def test_a_sender_whose_connection_the_receiver_closed_reconnects_for_its_done():
    """A receiver closes a connection idle past its idle_timeout. A write into it seems to succeed, so
    without a check the DONE frame would be lost and the receiver would wait for good."""
    server = socket.create_server(("127.0.0.1", 0))
    first_closed = threading.Event()
    kinds_per_connection = []

    def serve():
        with server:
            first, _ = server.accept()
            stream = first.makefile("rb")
            for _ in range(2):  # the HELLO and one API, then the "idle" connection is closed
                _kind, length = protocol.parse_prefix(stream.read(protocol.PREFIX.size), 1 << 20)
                stream.read(length)
            stream.close()  # the socket closes only when its file object does too
            first.close()
            first_closed.set()
            second, _ = server.accept()
            with second:
                kinds_per_connection.append(_frames(second))

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    sender = OnlineSender(rank=0, port=server.getsockname()[1], block_seconds=5)
    message = protocol.ApiMessage(0, 0, {"Torch.add.0.forward": {"input_args": []}}, {})
    sender.send(message)
    assert first_closed.wait(10)
    time.sleep(1.0)  # the connection stays idle, as between two steps
    sender.close(timeout=10)
    thread.join(10)
    assert kinds_per_connection == [[protocol.HELLO, protocol.DONE]]


def test_a_receiver_on_this_machine_admits_only_senders_of_its_user(tmp_path, monkeypatch):
    """With no token configured, a loopback receiver makes one in a file only this user can read: another
    local process that cannot read it adds nothing and cannot end the run; a sender of this user can."""
    from msprobe.core.online.receiver import Receiver

    monkeypatch.setenv("XDG_RUNTIME_DIR", str(tmp_path / "runtime"))
    receiver = Receiver(tmp_path / "out", "unused:runner", rank_list=[0], workers=1)
    checked = []
    receiver._submit = lambda item, name: checked.append(name)
    thread = threading.Thread(target=receiver.run, args=("127.0.0.1", 0), daemon=True)
    thread.start()
    deadline = time.monotonic() + 30
    while receiver.token_file is None and time.monotonic() < deadline:
        time.sleep(0.05)
    token_file = receiver.token_file
    port = int(token_file.stem.rsplit("-", 1)[1])
    assert token_file.parent == tmp_path / "runtime" / "msprobe"
    assert token_file.stat().st_mode & 0o777 == 0o600 and token_file.parent.stat().st_mode & 0o777 == 0o700
    entry = {"input_args": [], "input_kwargs": {}, "output": []}
    api = protocol.encode_api(protocol.ApiMessage(0, 0, {"Torch.add.0.forward": entry}, {}))
    with socket.create_connection(("127.0.0.1", port)) as stranger:  # knows the protocol, not the token
        stranger.sendall(protocol.encode_json(protocol.HELLO, {"sender": "x"}) + api)
        stranger.sendall(protocol.encode_json(protocol.DONE, {"sent": 1}))
        try:
            closed = stranger.recv(1) == b""  # closed by the receiver
        except ConnectionResetError:  # closed with bytes of ours unread, which the kernel answers with a reset
            closed = True
        assert closed
    assert checked == [] and not receiver.stopped.is_set() and receiver.rejected_frames == 1
    sender = OnlineSender(rank=0, port=port, block_seconds=5)
    sender.send(protocol.ApiMessage(0, 0, {"Torch.add.0.forward": entry}, {}))
    sender.close(timeout=10)
    thread.join(30)
    assert checked == ["Torch.add.0.forward"] and not token_file.exists()
