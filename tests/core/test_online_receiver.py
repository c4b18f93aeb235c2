"""The online receiver under hostile peers: who may send, what a bad frame does, and its limits.

Connections are driven through in-memory streams (the receiver's own handler), and checks are recorded
instead of run, so these tests need no framework and no network.
"""

import asyncio
import json
import os
import threading

import numpy as np
import pytest

from msprobe.core.errors import UsageError
from msprobe.core.online import protocol
from msprobe.core.online.receiver import Limits, Receiver


class _Transport:
    def __init__(self, reader):
        self.reader = reader

    def abort(self):
        self.reader.set_exception(ConnectionResetError())


class _Writer:
    def __init__(self, reader=None):
        self.closed = False
        self.transport = _Transport(reader)

    def get_extra_info(self, name):
        return ("203.0.113.9", 40000)

    def close(self):
        self.closed = True

    async def wait_closed(self):
        return None


@pytest.fixture
def receiver(tmp_path):
    made = []

    def make(**options):
        created = Receiver(tmp_path / f"out{len(made)}", "unused:runner", rank_list=[0], workers=1, **options)
        created.checked_names = []
        created._submit = lambda item, name: created.checked_names.append(name)
        made.append(created)
        return created

    yield make
    for created in made:
        created.pool.shutdown(cancel_futures=True)


def _api(name="Torch.add.0.forward", rank=0, step=0):
    entry = {"input_args": [], "input_kwargs": {}, "output": []}
    return protocol.encode_api(protocol.ApiMessage(rank, step, {name: entry}, {"x.npy": np.ones(2)}))


def _drive(receiver, *frames, eof=True):
    async def run():
        reader = asyncio.StreamReader()
        reader.feed_data(b"".join(frames))
        if eof:
            reader.feed_eof()
        writer = _Writer(reader)
        await receiver.handle(reader, writer)
        return writer

    return asyncio.run(run())


HELLO = protocol.encode_json(protocol.HELLO, {"sender": "rank0-a"})
DONE = protocol.encode_json(protocol.DONE, {"sender": "rank0-a", "rank": 0, "sent": 1, "dropped": 0})


def test_without_a_token_a_loopback_sender_is_trusted(receiver):
    plain = receiver()
    _drive(plain, HELLO, _api(), DONE)
    assert plain.checked_names == ["Torch.add.0.forward"] and plain.stopped.is_set()


def test_with_a_token_nobody_else_adds_rows_or_ends_the_run(receiver):
    guarded = receiver(token="s3cret")
    _drive(guarded, _api(), DONE)  # no HELLO at all
    _drive(guarded, protocol.encode_json(protocol.HELLO, {"sender": "x", "token": "guess"}), _api(), DONE)
    assert guarded.checked_names == [] and not guarded.stopped.is_set() and guarded.rejected_frames == 2
    hello = protocol.encode_json(protocol.HELLO, {"sender": "rank0-a", "token": "s3cret"})
    _drive(guarded, hello, _api(), DONE)
    assert guarded.checked_names == ["Torch.add.0.forward"] and guarded.stopped.is_set()


@pytest.mark.parametrize("sent", ["x", -1, 1.5, None, [1]])
def test_a_done_frame_with_bad_counts_is_refused_without_a_traceback_or_a_stop(receiver, caplog, sent):
    plain = receiver()
    writer = _drive(plain, HELLO, protocol.encode_json(protocol.DONE, {"sent": sent}))
    assert writer.closed and plain.rejected_frames == 1 and not plain.stopped.is_set()
    assert "Traceback" not in caplog.text and "bad frame" in caplog.text


def test_plain_tcp_beyond_this_machine_needs_tls_a_token_or_an_explicit_yes(receiver):
    with pytest.raises(UsageError, match="plain TCP with no token"):
        receiver().check_exposure("0.0.0.0", None)
    receiver().check_exposure("127.0.0.1", None)
    receiver().check_exposure("::1", None)
    receiver(token="t").check_exposure("0.0.0.0", None)
    receiver(allow_plain_remote=True).check_exposure("0.0.0.0", None)
    receiver().check_exposure("0.0.0.0", "/some/tls/folder")


def test_forwards_waiting_for_a_backward_are_bounded(receiver):
    bounded = receiver(limits=Limits(max_waiting_forwards=3))
    entry = {"input_args": [{"type": "torch.Tensor", "dtype": "torch.float32", "requires_grad": True}]}
    for index in range(10):
        message = protocol.ApiMessage(0, 0, {f"Torch.mul.{index}.forward": entry})
        bounded.on_api(message)
    assert len(bounded.pending) == 3 and bounded.evicted_forwards == 7
    assert [key[1] for key in bounded.pending] == ["Torch.mul.7", "Torch.mul.8", "Torch.mul.9"]


def test_a_half_frame_times_out(receiver):
    slow = receiver(limits=Limits(idle_timeout=0.2))
    writer = _drive(slow, HELLO, _api()[:20], eof=False)  # then nothing: the handler must give up by itself
    assert writer.closed and slow.open_connections == 0


def test_connections_past_the_limit_are_refused(receiver):
    full = receiver(limits=Limits(max_connections=2))
    full.admitted = 2
    writer = _drive(full, HELLO, _api())
    assert writer.closed and full.refused_connections == 1 and full.checked_names == []


def test_oversized_frames_are_refused_before_they_are_read(receiver):
    small = receiver(limits=Limits(max_frame=1000))
    _drive(small, HELLO, protocol.PREFIX.pack(protocol.MAGIC, protocol.VERSION, protocol.API, 10**12))
    assert small.rejected_frames == 1 and small.checked_names == []


def _prefix(kind, length):
    return protocol.PREFIX.pack(protocol.MAGIC, protocol.VERSION, kind, length)


@pytest.mark.parametrize("token", [None, "s3cret"])
def test_a_hello_over_4_kib_is_refused_from_its_header(receiver, caplog, token):
    guarded = receiver(token=token)
    writer = _drive(guarded, _prefix(protocol.HELLO, 199 << 20), b"x" * 5000)
    assert writer.closed and guarded.rejected_frames == 1
    assert "bytes is over 4096" in caplog.text or "over the limit of 4096" in caplog.text


def test_before_its_hello_a_connection_may_send_no_large_frame(receiver, caplog):
    guarded = receiver(token="s3cret")  # the frame limit is 256 MiB, but not for strangers
    _drive(guarded, _prefix(protocol.API, 100 << 20), b"x" * 5000)
    assert guarded.rejected_frames == 1 and "over the limit of 4096" in caplog.text


def test_a_connection_that_says_no_hello_in_time_is_closed(receiver, caplog):
    guarded = receiver(token="s3cret", limits=Limits(hello_timeout=0.2, idle_timeout=300))
    writer = _drive(guarded, HELLO[:5], eof=False)  # a slow start, then nothing
    assert writer.closed and guarded.open_connections == 0 and "no HELLO in time" in caplog.text


def test_strangers_neither_take_the_senders_slots_nor_keep_them_out(receiver):
    guarded = receiver(token="s3cret", limits=Limits(max_connections=2, max_unauthenticated=3, hello_timeout=60))
    hello = protocol.encode_json(protocol.HELLO, {"sender": "rank0-a", "token": "s3cret"})

    async def run():
        stalled = []
        for _ in range(10):  # connect and say nothing, as an attacker reconnecting would
            reader = asyncio.StreamReader()
            stalled.append((reader, asyncio.ensure_future(guarded.handle(reader, _Writer(reader)))))
            await asyncio.sleep(0)
        await asyncio.sleep(0.01)
        waiting, dropped = len(guarded.strangers), guarded.dropped_strangers
        honest = asyncio.StreamReader()
        honest.feed_data(hello + _api())
        honest.feed_eof()
        await guarded.handle(honest, _Writer(honest))
        for reader, task in stalled:
            if not task.done():
                reader.feed_eof()
        await asyncio.gather(*(task for _, task in stalled))
        return waiting, dropped

    waiting, dropped = asyncio.run(run())
    assert (waiting, dropped) == (3, 7)
    assert guarded.checked_names == ["Torch.add.0.forward"] and guarded.refused_connections == 0
    assert guarded.admitted == 0 and guarded.open_connections == 0 and not guarded.strangers


def test_shared_folder_files_that_are_no_frames_go_to_rejected(receiver, tmp_path):
    folder = tmp_path / "shared"
    folder.mkdir()
    (folder / "a_000000001.msprobe").write_bytes(b"")
    (folder / "b_000000001.msprobe").write_bytes(b"MSPB\x01")
    (folder / "c_000000001.msprobe").write_bytes(protocol.PREFIX.pack(protocol.MAGIC, 1, protocol.API, 99) + b"x")
    os.mkfifo(folder / "d_000000001.msprobe")
    (folder / "s_000000001.msprobe").write_bytes(_api())
    (folder / "s_000000002.msprobe").write_bytes(DONE)  # one sender: its DONE ends the run
    shared = receiver()

    async def run():
        await asyncio.wait_for(shared.serve_directory(folder, poll_seconds=0.01), timeout=10)

    worker = threading.Thread(target=lambda: asyncio.run(run()), daemon=True)
    worker.start()
    worker.join(timeout=30)
    if worker.is_alive():  # a blocking read of the FIFO: unblock it so the test ends, then fail
        for fifo in folder.rglob("d_000000001.msprobe"):
            with open(fifo, "wb"):
                pass
        pytest.fail("the receiver blocked on a FIFO")
    rejected = sorted(path.name for path in (folder / "rejected").iterdir())
    assert rejected == [f"{letter}_000000001.msprobe" for letter in "abcd"]
    assert shared.checked_names == ["Torch.add.0.forward"] and shared.rejected_frames == 4
    assert not list(folder.glob("*.msprobe"))


def _nested(kind: int, depth: int) -> bytes:
    """A control frame whose JSON is an object nested ``depth`` deep: deeper than Python's recursion limit."""
    return protocol.frame(kind, (b'{"a":' * depth) + b"1" + b"}" * depth)


def _serve_folder(shared, folder):
    async def run():
        await asyncio.wait_for(shared.serve_directory(folder, poll_seconds=0.01), timeout=10)

    asyncio.run(run())


def test_a_poison_file_is_set_aside_once_and_a_restart_goes_on(receiver, tmp_path, caplog):
    """A DONE (or HELLO) frame nested 100,000 deep killed the receiver with a RecursionError, and the file, never
    moved, killed every restart. It goes to rejected/ like any other bad file, and the run ends as usual."""
    folder = tmp_path / "shared"
    folder.mkdir()
    (folder / "p_000000001.msprobe").write_bytes(_nested(protocol.DONE, 100_000))
    (folder / "q_000000001.msprobe").write_bytes(_nested(protocol.HELLO, 100_000))
    (folder / "s_000000001.msprobe").write_bytes(_api())
    (folder / "s_000000002.msprobe").write_bytes(DONE)
    shared = receiver()
    _serve_folder(shared, folder)
    assert sorted(path.name for path in (folder / "rejected").iterdir()) == ["p_000000001.msprobe"]
    assert shared.checked_names == ["Torch.add.0.forward"] and shared.rejected_frames == 1
    assert "nested too deeply" in caplog.text and "Traceback" not in caplog.text
    # a second receiver over the same folder (a restart) meets none of it again
    (folder / "s_000000003.msprobe").write_bytes(DONE)
    again = receiver()
    _serve_folder(again, folder)
    assert again.rejected_frames == 0 and not list(folder.glob("*.msprobe"))


@pytest.mark.parametrize(
    "hello",
    [_nested(protocol.HELLO, 4000), protocol.encode_json(protocol.HELLO, {"sender": "x", "token": "t\u00e9st"})],
    ids=["nested 4000 deep", "non-ASCII token"],
)
def test_an_unreadable_hello_is_a_counted_refusal_not_a_traceback(receiver, caplog, hello):
    guarded = receiver(token="s3cret")
    writer = _drive(guarded, hello, _api(), DONE)
    assert writer.closed and guarded.rejected_frames == 1 and guarded.checked_names == []
    assert not guarded.stopped.is_set() and guarded.open_connections == 0 and not guarded.strangers
    assert "Traceback" not in caplog.text and "bad frame" in caplog.text


def test_a_flood_of_unreadable_hellos_logs_a_bounded_number_of_lines(receiver, caplog):
    guarded = receiver(token="s3cret")
    for _ in range(300):
        _drive(guarded, _nested(protocol.HELLO, 4000))
    assert guarded.rejected_frames == 300
    assert len([r for r in caplog.records if "bad frame" in r.getMessage()]) <= 25


def test_the_summary_counts_what_was_refused(receiver):
    counted = receiver(limits=Limits(max_connections=1))
    counted.admitted = 1
    _drive(counted, HELLO)
    summary = counted.write_summary()
    saved = json.loads(next(counted.files.result.parent.glob("online_summary_*.json")).read_text())
    assert summary["refused_connections"] == saved["refused_connections"] == 1
    assert {"evicted_forwards", "rejected_frames", "interrupted", "dropped_unauthenticated"} <= set(saved)


def test_accept_errors_at_fd_exhaustion_are_logged_once_a_minute():
    import logging

    from msprobe.core.online.receiver import _AcceptErrorFilter

    accept_filter = _AcceptErrorFilter()

    def record(message):
        return logging.LogRecord("asyncio", logging.ERROR, __file__, 1, message, (), None)

    flood = [accept_filter.filter(record("socket.accept() out of system resource")) for _ in range(1000)]
    assert flood.count(True) == 1  # a thousand failed accepts, one line
    assert accept_filter.filter(record("something else went wrong"))  # other asyncio errors pass


def test_a_refused_start_leaves_no_empty_result_files(tmp_path, monkeypatch):
    """The token's folder is a link planted by someone else: the receiver refuses to start, and the result CSVs
    it had opened (headers only, as a finished run that checked nothing would leave them) go too."""
    from msprobe.core.errors import DataFileError

    runtime = tmp_path / "runtime"
    runtime.mkdir()
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    (runtime / "msprobe").symlink_to(elsewhere)
    monkeypatch.setenv("XDG_RUNTIME_DIR", str(runtime))
    out = tmp_path / "out"
    receiver = Receiver(out, "unused:runner", rank_list=[0], workers=1)
    assert sorted(path.name.split("_")[0] for path in out.iterdir()) == ["accuracy", "accuracy"]
    with pytest.raises(DataFileError, match="not a folder of this user's own"):
        receiver.run(host="127.0.0.1", port=0)
    assert not list(out.iterdir()) and not list(elsewhere.iterdir())
