"""The C builder of compare rows (compare/_tablerows.c) gives the rows the Python path gives.

The Python path is the one the conformance tests tie to the reference tool's compare; the C builder takes only
entries made of plain tensor summaries and must hand every other entry back whole. Expected names and values
of a small entry are written out by hand.
"""

from __future__ import annotations

import copy
import json
import random
from dataclasses import astuple
from pathlib import Path

import pytest
from test_compare_stream import _entries, _run, _tensor, write_varied_pair

from msprobe.core.compare import engine, rows, stream
from msprobe.core.dump import stream as dump_stream
from msprobe.core.dump.reader import Dump
from msprobe.core.errors import DataFileError

pytestmark = pytest.mark.skipif(rows._tablerows is None, reason="built without a C compiler")


def _rows(data: dict, in_c: bool, monkeypatch) -> list[tuple]:
    if not in_c:
        monkeypatch.setattr(rows, "_tablerows", None)
    built = rows.dump_rows(Dump.from_header(Path("dump.json"), {}, data), every_value=True)
    monkeypatch.undo()
    return [astuple(row) for row in built]


def _oddities(rng: random.Random) -> dict:
    """Entries the C builder must hand back: anything but plain tensor summaries, anywhere in a call."""
    odd = {
        "int statistic": {**_tensor(rng), "Norm": 3},
        "absent statistic": {key: value for key, value in _tensor(rng).items() if key != "Mean"},
        "dtype not text": {**_tensor(rng), "dtype": 7},
        "type not text": {**_tensor(rng), "type": None},
        "huge size": {**_tensor(rng), "shape": [2**70]},
    }
    data = {}
    for index, (why, value) in enumerate(odd.items()):
        data[f"Torch.odd{index}.0.forward"] = {"input_args": [_tensor(rng), value], "output": [_tensor(rng)]}
        data[f"Module.odd{index}.Linear.forward.0"] = {"input_kwargs": {"x": _tensor(rng)}, "parameters": {why: value}}
    data["Torch.output_none.0.forward"] = {"input_args": [], "output": [None]}
    data["Torch.not_a_call.0.forward"] = ["a list"]
    return data


def test_c_rows_are_the_python_rows_on_varied_dumps(monkeypatch):
    rng = random.Random(7)
    data = _entries(rng, 800)
    data.update(_oddities(rng))
    many = [_tensor(rng) for _ in range(70)]  # indexes past the texts the C builder keeps ready
    for index, value in enumerate(many):
        value["md5"], value["data_name"] = f"{index:08x}", f"Torch.big.0.forward.input.{index}.pt"
    data["Torch.big.0.forward"] = {"input_args": many, "output": [_tensor(rng)]}
    data = json.loads(json.dumps(data))  # as a dump.json parser gives them
    expected = _rows(copy.deepcopy(data), False, monkeypatch)
    assert _rows(data, True, monkeypatch) == expected
    assert len(expected) > 3000


def test_c_rows_by_hand(monkeypatch):
    data = {
        "Module.fc.Linear.forward.0": {
            "input_args": [{"type": "torch.Tensor", "dtype": "torch.float16", "shape": [2, 3],
                            "Max": 1.5, "Min": -2.0, "Mean": 0.25, "Norm": 3.0, "md5": "0a1b2c3d"}],
            "input_kwargs": {},
            "output": [{"type": "torch.Tensor", "dtype": "torch.float16", "shape": [2, 4],
                        "Max": 4.0, "Min": 0.0, "Mean": 1.0, "Norm": 5.0, "data_name": "fc.output.0.pt"}],
            "parameters": {"weight": {"type": "torch.Tensor", "dtype": "torch.float32", "shape": [4, 3],
                                      "Max": 0.5, "Min": -0.5, "Mean": 0.0, "Norm": 1.0}},
        }
    }  # fmt: skip
    entry = "Module.fc.Linear.forward.0"
    assert _rows(data, True, monkeypatch) == [
        (f"{entry}.input.0", entry, "torch.float16", [2, 3], (1.5, -2.0, 0.25, 3.0), "0a1b2c3d", None, "input", ""),
        (f"{entry}.parameters.weight", entry, "torch.float32", [4, 3], (0.5, -0.5, 0.0, 1.0), None, None,
         "parameters", ""),
        (f"{entry}.output.0", entry, "torch.float16", [2, 4], (4.0, 0.0, 1.0, 5.0), None, "fc.output.0.pt",
         "output", ""),
    ]  # fmt: skip


@pytest.mark.parametrize(
    ("value", "field"),
    [
        ({"shape": [-1]}, "shape"),
        ({"shape": [True, 2]}, "shape"),
        ({"shape": "2x3"}, "shape"),
        ({"Max": [1.0]}, "Max"),
        ({"shape": [2**70], "Min": {}}, "Min"),
    ],
)
def test_bad_values_are_named_as_the_python_path_names_them(value, field, monkeypatch):
    rng = random.Random(3)
    data = {"Torch.add.0.forward": {"input_args": [_tensor(rng), {**_tensor(rng), **value}], "output": []}}
    with pytest.raises(DataFileError) as raised:
        rows.dump_rows(Dump.from_header(Path("dump.json"), {}, data), every_value=True)
    assert "Torch.add.0.forward.input.1" in str(raised.value) and f"field '{field}'" in str(raised.value)


def test_only_other_entries_go_to_the_python_path():
    rng = random.Random(5)
    plain = {"input_args": [_tensor(rng)], "input_kwargs": {"y": _tensor(rng)}, "output": [_tensor(rng)]}
    other = {"input_args": [_tensor(rng), {"type": "int", "value": 3}], "output": [_tensor(rng)]}
    data = {"Torch.a.0.forward": plain, "Torch.b.0.forward": other, "Torch.c.0.forward": plain}
    built, handed_back = [], []
    rows._tablerows.table_rows(data, built, lambda entry, content: handed_back.append((entry, len(built))))
    assert handed_back == [("Torch.b.0.forward", 3)]  # in order: after the first entry's three rows
    assert [row.name for row in built] == [
        "Torch.a.0.forward.input.0", "Torch.a.0.forward.input.y", "Torch.a.0.forward.output.0",
        "Torch.c.0.forward.input.0", "Torch.c.0.forward.input.y", "Torch.c.0.forward.output.0",
    ]  # fmt: skip


def test_a_section_of_the_wrong_kind_is_named():
    data = {"Torch.add.0.forward": {"input_args": [], "input_kwargs": None}}
    with pytest.raises(DataFileError, match="entry 'Torch.add.0.forward', field 'input_kwargs': expected a dict"):
        rows.dump_rows(Dump.from_header(Path("dump.json"), {}, data), every_value=True)


def test_a_streamed_compare_gives_the_same_files_without_the_builder(tmp_path, monkeypatch):
    """The helper's rows (rows_of), the bench side's index (index_rows) and the table's columns
    (pair_columns), in C and in Python."""
    monkeypatch.setattr(dump_stream, "BLOCK_BYTES", 4096)
    monkeypatch.setattr(stream, "HELPER_FROM_BYTES", 0)  # the helper reads part of the bench side
    monkeypatch.setattr(stream, "_can_fork", lambda: True)  # other tests may leave threads in this process
    monkeypatch.setattr(stream, "XLSX_ROW_LIMIT", 0)
    npu, bench = write_varied_pair(tmp_path)
    with_c = _run(npu, bench, tmp_path / "c", monkeypatch, "always")
    for module in (rows, stream, engine):  # every C path, the bench index and pairing too
        monkeypatch.setattr(module, "_tablerows", None)
    without = _run(npu, bench, tmp_path / "python", monkeypatch, "always")
    assert with_c[1:3] == without[1:3] and with_c[0].line() == without[0].line()
    assert with_c[1].count(b"\n") > 3000


def test_table_columns_are_the_python_ones(monkeypatch):
    rng = random.Random(11)
    data = json.loads(json.dumps({**_entries(rng, 300), **_oddities(rng)}))
    built = rows.dump_rows(Dump.from_header(Path("dump.json"), {}, data), every_value=True)
    assert {row.shown_dtype for row in built} >= {"", None, "<class 'int'>"}  # tensors, None, plain values
    pairs = [(row, built[-index - 1] if index % 3 else None) for index, row in enumerate(built)]
    pairs += [(None, row) for row in built[:50]]
    engine._SHAPE_TEXTS.clear()
    in_c = engine._pair_columns(pairs)
    monkeypatch.setattr(engine, "_tablerows", None)
    in_python = engine._pair_columns(pairs)
    assert in_c == in_python
    assert in_c[0]["NPU Name"][:2] == [built[0].name, built[1].name]
    assert in_c[0]["Bench Tensor Shape"][0] == engine.NA and in_c[1][:2] == [1, 2]
    assert in_c[4]["NPU max"][0] == built[0].stats[0]


def test_table_columns_take_only_pairs_of_rows():
    row = rows.Row("a", "e", "torch.float32", [2], (1.0, 2.0, 3.0, 4.0), None, None, "input")
    assert engine._tablerows.pair_columns([(row, row), (row, "not a row")], engine.NA, {}) is None
    assert engine._tablerows.pair_columns([(row, None), [row, row]], engine.NA, {}) is None
