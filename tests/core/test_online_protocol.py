import io
import json
import struct

import numpy as np
import pytest

from msprobe.core.online import protocol


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
