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
