"""Property-based fuzzing of every parser of outside data: only the tool's own error, no hang, bounded work.

Each test feeds generated input (hypothesis) to one reader and requires that it either succeeds or raises
the tool's error (MsprobeError and its kinds: one clear message), never anything else. Inputs that once
crashed a reader stay as explicit examples. The budget is bounded (max_examples, small sizes) so the whole
file runs in seconds inside the core nox session.
"""

from __future__ import annotations

import asyncio
import csv
import io
import json
import struct

import numpy as np
import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from msprobe.core.compare.merge import merge_results
from msprobe.core.compare.pipeline import compare_dumps
from msprobe.core.config import load_config
from msprobe.core.dump.reader import read_dump
from msprobe.core.errors import MsprobeError
from msprobe.core.online import protocol
from msprobe.core.online.receiver import Receiver
from msprobe.core.precheck.precision_compare import DETAIL_COLUMNS, read_details
from msprobe.core.tensor_files import load_npy

BUDGET = settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])

scalars = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(min_value=-(2**70), max_value=2**70),
    st.floats(allow_nan=True, allow_infinity=True),
    st.text(max_size=12),
)
json_values = st.recursive(
    scalars,
    lambda children: st.lists(children, max_size=4) | st.dictionaries(st.text(max_size=8), children, max_size=4),
    max_leaves=25,
)
# values shaped like dump.json summaries, with any field possibly wrong
summaries = st.fixed_dictionaries(
    {"type": st.sampled_from(["torch.Tensor", "int", "float", "slice", "torch.Size", "str"])},
    optional={
        "dtype": st.one_of(st.sampled_from(["torch.float32", "torch.int64", "Float16"]), json_values),
        "shape": st.one_of(st.lists(st.integers(min_value=-3, max_value=5), max_size=3), json_values),
        "Max": json_values,
        "Min": json_values,
        "Mean": scalars,
        "Norm": scalars,
        "value": json_values,
        "md5": st.one_of(st.text(max_size=10), scalars),
        "data_name": st.one_of(st.text(max_size=20), scalars),
    },
)
sections = st.one_of(st.lists(st.one_of(summaries, json_values), max_size=3), json_values)
entries = st.dictionaries(
    st.sampled_from(["input_args", "input_kwargs", "output", "input", "parameters", "junk"]), sections, max_size=4
)
entry_names = st.sampled_from(
    ["Functional.relu.0.forward", "Functional.relu.0.backward", "Module.fc.Linear.forward.0", "Tensor.add.1.forward"]
) | st.text(max_size=20)
dumps = st.fixed_dictionaries(
    {"data": st.dictionaries(entry_names, entries | json_values, max_size=4)},
    optional={"task": st.sampled_from(["statistics", "tensor", "x"]) | json_values, "level": json_values},
)


def _only_our_error(action):
    try:
        action()
    except MsprobeError:
        pass


@BUDGET
@given(content=json_values)
@example(content={"dump_path": "x", "step": ["0-99999999999"]})
@example(content={"dump_path": "x", "statistics": {"list": ["name-regex(a[)"]}})
def test_config_json(tmp_path, content):
    path = tmp_path / "config.json"
    try:
        path.write_text(json.dumps(content))
    except ValueError:
        return  # not representable as JSON text (nan keys etc.)
    _only_our_error(lambda: load_config(path))


@BUDGET
@given(text=st.text(max_size=200) | st.just("[" * 100_000 + "]" * 100_000))
def test_config_text_json_and_yaml(tmp_path, text):
    for name in ("config.json", "config.yaml"):
        path = tmp_path / name
        path.write_text(text, encoding="utf-8")
        _only_our_error(lambda path=path: load_config(path))


@BUDGET
@given(npu=dumps, bench=dumps)
@example(
    npu={"data": {"Functional.relu.0.forward": {"input_args": None}}},
    bench={"data": {"Functional.relu.0.forward": {"output": [{"type": "torch.Tensor", "shape": "abc"}]}}},
)
@example(
    npu={"data": {"Functional.relu.0.forward": {"output": [{"type": "torch.Tensor", "dtype": "x", "Max": 10**400}]}}},
    bench={"data": {}},
)
def test_dump_json_through_compare(tmp_path, npu, bench):
    for side, content in (("npu", npu), ("bench", bench)):
        (tmp_path / side).mkdir(exist_ok=True)
        (tmp_path / side / "dump.json").write_text(json.dumps(content))
    _only_our_error(lambda: compare_dumps(read_dump(tmp_path / "npu"), read_dump(tmp_path / "bench")))


@BUDGET
@given(stack=json_values, construct=json_values, raw=st.binary(max_size=64))
def test_stack_construct_and_raw_dump_bytes(tmp_path, stack, construct, raw):
    folder = tmp_path / "d"
    folder.mkdir(exist_ok=True)
    (folder / "dump.json").write_text(json.dumps({"task": "statistics", "data": {}}))
    (folder / "stack.json").write_text(json.dumps(stack))
    (folder / "construct.json").write_text(json.dumps(construct))
    _only_our_error(lambda: read_dump(folder))
    (folder / "dump.json").write_bytes(raw)
    _only_our_error(lambda: read_dump(folder))


# NUL left out: Python 3.10's csv module cannot write it, and this test writes its input with it
CSV_TEXT = st.text(alphabet=st.characters(codec="utf-8", blacklist_characters="\x00"), max_size=10)


@BUDGET
@given(rows=st.lists(st.lists(CSV_TEXT, min_size=0, max_size=len(DETAIL_COLUMNS) + 2), max_size=5))
def test_details_csv_for_api_precision_compare(tmp_path, rows):
    path = tmp_path / "details.csv"
    with open(path, "w", encoding="utf-8-sig", newline="") as handle:
        writer = csv.writer(handle)
        writer.writerow(DETAIL_COLUMNS)
        writer.writerows(rows)
    _only_our_error(lambda: read_details(path))


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(text=st.text(max_size=300))
def test_compare_result_csv_for_merge_result(tmp_path, text):
    folder = tmp_path / "results"
    folder.mkdir(exist_ok=True)
    (folder / "compare_result_rank0_20260101000000.csv").write_text(text)
    (tmp_path / "merge.yaml").write_text("api: [Functional]\ncompare_index: [Max diff]\n")
    _only_our_error(lambda: merge_results(folder, tmp_path / "merged", tmp_path / "merge.yaml"))


@BUDGET
@given(data=st.binary(max_size=80))
@example(data=b"")
@example(data=b"MSPB\x01")
@example(data=protocol.PREFIX.pack(protocol.MAGIC, 1, protocol.API, 10**15))
def test_online_frames(data):
    for decode in (protocol.decode_api, protocol.decode_json, protocol.decode_hello, protocol.decode_done):
        try:
            decode(data)
        except protocol.ProtocolError:
            pass
    try:
        protocol.parse_prefix(data, 1 << 20)
    except protocol.ProtocolError:
        pass


api_headers = json_values.map(lambda value: json.dumps(value).encode())
frames = st.builds(
    protocol.frame,
    st.sampled_from([protocol.HELLO, protocol.API, protocol.DONE, 9]),
    st.one_of(
        st.binary(max_size=40),
        json_values.map(lambda value: json.dumps(value, allow_nan=True).encode()),
        st.builds(
            lambda header: struct.pack(">I", len(header)) + header, json_values.map(lambda v: json.dumps(v).encode())
        ),
    ),
)


@pytest.fixture(scope="module")
def receiver(tmp_path_factory):
    made = Receiver(tmp_path_factory.mktemp("receiver"), "unused:runner", rank_list=[0], workers=1)
    made._submit = lambda item, name: None
    yield made
    made.pool.shutdown(cancel_futures=True)


class _Writer:
    def get_extra_info(self, name):
        return ("198.51.100.7", 1)

    def close(self):
        pass

    async def wait_closed(self):
        return None


@BUDGET
@given(stream=st.lists(frames, max_size=4), tail=st.binary(max_size=20))
def test_receiver_connections(receiver, stream, tail):
    """Whatever a peer sends, the handler returns (no exception escapes it), and the run goes on."""

    async def run():
        reader = asyncio.StreamReader()
        reader.feed_data(b"".join(stream) + tail)
        reader.feed_eof()
        await asyncio.wait_for(receiver.handle(reader, _Writer()), timeout=10)

    asyncio.run(run())
    receiver.stopped.clear()  # a well-formed HELLO+DONE may end a trusted (loopback) run: start afresh


@BUDGET
@given(data=st.binary(max_size=200))
@example(data=b"\x93NUMPY\x01\x00v\x00{'descr': '|O', 'fortran_order': False, 'shape': (1,), }" + b" " * 60)
@example(data=b"PK\x03\x04" + b"\x00" * 40)  # numpy would take it for an .npz
def test_npy_reader(tmp_path, data):
    path = tmp_path / "x.npy"
    path.write_bytes(data)
    _only_our_error(lambda: load_npy(path))


def test_an_npz_named_npy_is_refused_in_one_line(tmp_path):
    np.savez(tmp_path / "x.npz", x=np.ones(3))
    (tmp_path / "x.npz").rename(tmp_path / "x.npy")
    with pytest.raises(MsprobeError, match="not an .npy file"):
        load_npy(tmp_path / "x.npy")


def test_npy_reader_reads_what_numpy_writes(tmp_path):
    buffer = io.BytesIO()
    np.save(buffer, np.arange(4, dtype=np.float32))
    (tmp_path / "x.npy").write_bytes(buffer.getvalue())
    assert load_npy(tmp_path / "x.npy").tolist() == [0.0, 1.0, 2.0, 3.0]


def test_a_nul_in_a_dump_name_is_written_as_text_in_every_csv():
    """Python 3.10's csv module refuses a NUL ("need to escape"); a name read from someone's dump may hold one."""
    import io

    from msprobe.core import spreadsheet

    handle = io.StringIO()
    spreadsheet.writer(handle).writerow(["Torch.add\x00.0.forward", "=1+1"])
    assert handle.getvalue() == "Torch.add\\x00.0.forward,'=1+1\r\n"


# the streamed compare's reader: rows straight from the text (C) against the rows of the parsed entries
plain_summaries = st.fixed_dictionaries(
    {
        "type": st.just("torch.Tensor"),
        "dtype": st.sampled_from(["torch.float32", "torch.bfloat16"]) | st.text(max_size=4),
        "shape": st.lists(st.integers(min_value=0, max_value=2**64), max_size=3),
        "Max": st.floats(),
        "Min": st.floats(),
        "Mean": st.floats(),
        "Norm": st.floats(),
    },
    optional={"requires_grad": st.booleans(), "md5": st.text(max_size=8), "data_name": st.text(max_size=8)},
)
streamed_entries = st.dictionaries(
    st.sampled_from(["input_args", "input_kwargs", "output", "parameters", "junk"]),
    st.lists(plain_summaries | summaries, max_size=3)
    | st.dictionaries(st.text(max_size=4), plain_summaries, max_size=2),
    max_size=4,
)


def _streamed_rows(path, in_c: bool):
    from dataclasses import astuple

    from msprobe.core.compare import large
    from msprobe.core.compare import rows as table_rows
    from msprobe.core.dump.block_reader import DumpStream

    kept = table_rows.c_rows
    table_rows.c_rows = kept if in_c else None
    try:
        found, names = [], []
        for rows, block_names in large._row_blocks(DumpStream(path, 256), None):
            found += [astuple(row) for row in rows]
            names += block_names
        return "read", str(found), names
    except MsprobeError:
        return "error", None, None
    finally:
        table_rows.c_rows = kept


@BUDGET
@given(
    data=st.dictionaries(entry_names, streamed_entries | json_values, max_size=5),
    indent=st.sampled_from([None, 1]),
    change=st.tuples(st.floats(min_value=0, max_value=1), st.sampled_from(list(',:{}[]"\\ 0e-.')), st.booleans())
    | st.none(),
)
@example(data={"a": {"input_args": [{"type": "t", "dtype": "d", "shape": [], "Max": 1.5, "Min": 1.5, "Mean": 1.5,
                                     "Norm": 1.5}]}}, indent=None, change=(0.5, "0", True))  # fmt: skip
def test_dump_json_read_for_a_streamed_compare(tmp_path, data, indent, change):
    text = json.dumps({"task": "statistics", "data": data}, indent=indent)
    if change is not None:  # one character replaced or put in
        where, character, insert = change
        at = int(where * len(text))
        text = text[:at] + character + text[at + (0 if insert else 1) :]
    path = tmp_path / "dump.json"
    path.write_text(text)
    in_python, in_c = _streamed_rows(path, False), _streamed_rows(path, True)
    assert in_c[0] == in_python[0]
    if in_c[0] == "read" and len(set(in_c[2])) == len(in_c[2]):  # a name twice: the compare reads it whole
        assert in_c == in_python
