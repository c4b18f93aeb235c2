"""The C builder of compare rows (compare/_tablerows.c) gives the rows the Python path gives.

The Python path is the one the conformance tests tie to the reference tool's compare; the C builder takes only
entries made of plain tensor summaries and must hand every other entry back whole. Expected names and values
of a small entry are written out by hand.
"""

from __future__ import annotations

import copy
import json
import math
import random
from dataclasses import astuple
from pathlib import Path

import pytest
from test_compare_large import _entries, _run, _tensor, write_varied_pair

from msprobe.core.compare import large, rows, tables
from msprobe.core.dump import _jsonscan, block_reader
from msprobe.core.dump.reader import Dump
from msprobe.core.errors import DataFileError

pytestmark = pytest.mark.skipif(rows.c_rows is None, reason="built without a C compiler")


def _rows(data: dict, in_c: bool, monkeypatch) -> list[tuple]:
    if not in_c:
        monkeypatch.setattr(rows, "c_rows", None)
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
                        "Max": 4.0, "Min": 0.0, "Mean": 1.0, "Norm": 5.0,
                        "data_name": "Module.fc.Linear.forward.0.output.0.pt"}],
            "parameters": {"weight": {"type": "torch.Tensor", "dtype": "torch.float32", "shape": [4, 3],
                                      "Max": 0.5, "Min": -0.5, "Mean": 0.0, "Norm": 1.0}},
        }
    }  # fmt: skip
    entry = "Module.fc.Linear.forward.0"
    assert _rows(data, True, monkeypatch) == [
        (f"{entry}.input.0", entry, "torch.float16", [2, 3], (1.5, -2.0, 0.25, 3.0), "0a1b2c3d", None, "input", ""),
        (f"{entry}.parameters.weight", entry, "torch.float32", [4, 3], (0.5, -0.5, 0.0, 1.0), None, None,
         "parameters", ""),
        (f"{entry}.output.0", entry, "torch.float16", [2, 4], (4.0, 0.0, 1.0, 5.0), None, f"{entry}.output.0.pt",
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
    rows.c_rows.table_rows(data, built, lambda entry, content: handed_back.append((entry, len(built))))
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
    monkeypatch.setattr(block_reader, "BLOCK_BYTES", 4096)
    monkeypatch.setattr(large, "HELPER_FROM_BYTES", 0)  # the helper reads part of the bench side
    monkeypatch.setattr(large, "_can_fork", lambda: True)  # other tests may leave threads in this process
    monkeypatch.setattr(large, "XLSX_ROW_LIMIT", 0)
    npu, bench = write_varied_pair(tmp_path)
    with_c = _run(npu, bench, tmp_path / "c", monkeypatch, "always")
    monkeypatch.setattr(rows, "c_rows", None)  # every C path, the bench index and pairing too
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
    tables._SHAPE_TEXTS.clear()
    in_c = tables._pair_columns(pairs)
    monkeypatch.setattr(rows, "c_rows", None)
    in_python = tables._pair_columns(pairs)
    assert in_c == in_python
    assert in_c[0]["NPU Name"][:2] == [built[0].name, built[1].name]
    assert in_c[0]["Bench Tensor Shape"][0] == tables.NA and in_c[1][:2] == [1, 2]
    assert in_c[4]["NPU max"][0] == built[0].stats[0]


def test_table_columns_take_only_pairs_of_rows():
    row = rows.Row("a", "e", "torch.float32", [2], (1.0, 2.0, 3.0, 4.0), None, None, "input")
    assert rows.c_rows.pair_columns([(row, row), (row, "not a row")], tables.NA, {}) is None
    assert rows.c_rows.pair_columns([(row, None), [row, row]], tables.NA, {}) is None


# rows straight from the text (parse_rows): the same rows and names as parsing each block as a dict


class Raw(str):
    """JSON text written as it is."""


def _spaced(rng: random.Random) -> str:
    return rng.choice(["", "", " ", "\n  ", "\t", " \r\n "])


def _number_text(rng: random.Random, value: float) -> str:
    """JSON spellings of a float: equal ones, and some read another way (an int, a long run of digits)."""
    if not math.isfinite(value):
        return rng.choice(["NaN", "Infinity", "-Infinity", "1e400", "-1E400"])
    text = repr(value)
    if value == int(value) and abs(value) < 1e15 and rng.random() < 0.5:
        return str(int(value))  # an int in JSON: read as an int
    choice = rng.randrange(8)
    if choice == 0 and "e" in text:
        return text.replace("e", "E")
    if choice == 1 and "e" not in text:
        return rng.choice([f"{text}e0", f"{text}E+00", f"{text}e-0"])
    if choice == 2:
        return f"{value:.25f}"  # 19 digits or more in a row
    return text


def _text(rng: random.Random, value) -> str:
    """JSON text of ``value`` with random spacing and number spellings."""
    if isinstance(value, Raw):
        return value
    if isinstance(value, dict):
        items = [f"{_spaced(rng)}{_text(rng, key)}{_spaced(rng)}:{_spaced(rng)}{_text(rng, item)}"
                 for key, item in value.items()]  # fmt: skip
        return "{" + ",".join(items) + _spaced(rng) + "}"
    if isinstance(value, list):
        return "[" + ",".join(_spaced(rng) + _text(rng, item) for item in value) + _spaced(rng) + "]"
    if isinstance(value, float):
        return _number_text(rng, value)
    return json.dumps(value)


def _odd_summary(rng: random.Random):
    """A summary the text reader must hand back, or read right."""
    tensor = _tensor(rng)
    return rng.choice([
        {**tensor, "Max": 3.0, "Min": -1.0},  # may be written as ints
        {**tensor, "md5": "0a1b2c3d", "data_name": "x.pt"},
        {**tensor, "md5": None},
        {**tensor, "requires_grad": None},
        {**tensor, "extra": [1, {"a": 2}]},
        {**tensor, Raw('"dtype"'): Raw(r'"torch.float32\u00e9"')},
        {**tensor, "dtype": "torch.floét"},
        {**tensor, "shape": [2, 10**19]},
        {**tensor, "shape": []},
        {**tensor, "Mean": float("inf")},
        {key: value for key, value in tensor.items() if key != "type"},
        Raw('{"type": "torch.Tensor", "dtype": "torch.float32", "shape": [2], "Max": 1.5, "Min": 1.5, "Mean": 1.5, '
            '"Norm": 1.5, "Max": 2.5}'),  # a key twice: the last one counts
    ])  # fmt: skip


def _varied_text(rng: random.Random, count: int) -> str:
    members = []
    for index in range(count):
        name = json.dumps(f"Torch.op{index % 5}.{index}.forward")
        if index % 17 == 0:
            name = json.dumps(f"Module.m{index}.parameters_grad")
        elif index % 23 == 0:
            name = f'"Torch.\\u00fcber.{index}.forward"'
        elif index % 29 == 0:
            name = json.dumps(f"Torch.ünder.{index}.forward", ensure_ascii=False)
        sections = {"input_args": [_tensor(rng) for _ in range(rng.randint(0, 3))],
                    "input_kwargs": {f"k{k}": _tensor(rng) for k in range(rng.randint(0, 2))},
                    "output": [_tensor(rng)], "parameters": {"weight": _tensor(rng)}}  # fmt: skip
        keys = rng.sample(list(sections), rng.randint(0, 4))
        entry = {key: sections[key] for key in keys}
        roll = rng.random()
        if roll < 0.3 and entry:
            section = rng.choice(keys)
            if isinstance(entry[section], list):
                entry[section].append(_odd_summary(rng))
            else:
                entry[section][Raw('"k0"') if rng.random() < 0.2 else "odd"] = _odd_summary(rng)  # maybe twice
        elif roll < 0.35:
            entry["is_forward"] = True  # a field of no section
        elif roll < 0.38:
            entry[Raw('"output"')] = [_tensor(rng)]  # a section twice, where it is there already
        elif roll < 0.41:
            entry["input_kwargs"] = {"k0": _tensor(rng), Raw('"k0"'): _tensor(rng)}  # a key twice
        members.append(f"{_spaced(rng)}{name}{_spaced(rng)}:{_spaced(rng)}{_text(rng, entry)}")
    return '{"task": "statistics", "level": "L1", "framework": "pytorch", "data": {' + ",".join(members) + "}}"


def _read_rows(path: Path, monkeypatch, in_c: bool, block_bytes: int) -> tuple[list[tuple], list[str]]:
    if not in_c:
        monkeypatch.setattr(rows, "c_rows", None)
    try:
        reader = block_reader.DumpStream(path, block_bytes)
        found, names = [], []
        for block_rows, block_names in large._row_blocks(reader, None):
            found += [astuple(row) for row in block_rows]
            names += block_names
    finally:  # the builder back, also when reading raised
        monkeypatch.undo()
    return found, names


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_rows_read_from_the_text_are_the_rows_of_the_parsed_entries(tmp_path, monkeypatch, seed):
    rng = random.Random(seed)
    path = tmp_path / "dump.json"
    path.write_text(_varied_text(rng, 1500), encoding="utf-8")
    block_bytes = rng.choice([2048, 65536])
    in_python = _read_rows(path, monkeypatch, False, block_bytes)
    in_c = _read_rows(path, monkeypatch, True, block_bytes)
    assert len(in_python[0]) > 3000 and len(in_python[1]) == 1500
    assert str(in_c) == str(in_python)  # str: NaN statistics compare equal as text
    assert [type(cell) for row in in_c[0] for cell in row[4]] == [type(cell) for row in in_python[0] for cell in row[4]]


@pytest.mark.parametrize(
    "member",
    [
        '"Torch.a.0.forward": {"input_args": [{"type": "torch.Tensor", "dtype": "torch.float32", "shape": [2], '
        '"Max": 01.5, "Min": 1.0, "Mean": 1.0, "Norm": 1.0}]}',  # a leading zero
        '"Torch.a.0.forward": {"input_args": [{"type": "torch.Tensor", "dtype": "torch.float32", "shape": [2], '
        '"Max": 1.5, "Min": 1.0, "Mean": 1.0, "Norm": 1.0}],}',  # a trailing comma
        '"Torch.a.0.forward": {"input_args": [{"type": "torch.Tensor", "dtype": "torch.float32", "shape": [2 3], '
        '"Max": 1.5, "Min": 1.0, "Mean": 1.0, "Norm": 1.0}]}',  # no comma between sizes
        '"Torch.a.0.forward" {"input_args": []}',  # no colon
    ],
)
def test_bad_text_is_named_as_before(tmp_path, monkeypatch, member):
    good = '"Torch.b.0.forward": {"output": []}'
    path = tmp_path / "dump.json"
    path.write_text('{"task": "statistics", "data": {' + f"{good}, {member}, {good.replace('b', 'c')}" + "}}")
    messages = []
    for in_c in (False, True):
        with pytest.raises(DataFileError) as raised:
            _read_rows(path, monkeypatch, in_c, 65536)
        messages.append(str(raised.value))
    assert messages[0] == messages[1] and "at byte" in messages[0]


def test_only_other_members_are_handed_back():
    rng = random.Random(9)
    plain = json.dumps({"input_args": [_tensor(rng)], "output": [_tensor(rng)]})
    odd = json.dumps({"input_args": [{"type": "int", "value": 3}]})
    text = f'"Torch.a.0.forward": {plain}, "Torch.b.0.forward": {odd}, "Torch.c.0.forward": {plain}'.encode()
    found, names, handed = [], [], []
    commas, _ = _jsonscan.member_ends(text, 0)  # where the scanner finds the members end
    rows.c_rows.parse_rows(text, 0, len(text), commas, found, names, lambda first, end: handed.append(text[first:end]))
    assert handed == [f'"Torch.b.0.forward": {odd}'.encode()]
    assert names == ["Torch.a.0.forward", "Torch.c.0.forward"]
    assert [row.name for row in found] == [
        "Torch.a.0.forward.input.0", "Torch.a.0.forward.output.0",
        "Torch.c.0.forward.input.0", "Torch.c.0.forward.output.0",
    ]  # fmt: skip


def test_a_comma_after_the_last_entry_is_an_error_either_way(tmp_path, monkeypatch):
    rng = random.Random(6)
    entry = json.dumps({"input_args": [_tensor(rng)], "output": [_tensor(rng)]})
    path = tmp_path / "dump.json"
    path.write_text('{"task": "statistics", "data": {"Torch.a.0.forward": ' + entry + ",  }}")
    for in_c in (False, True):
        with pytest.raises(DataFileError, match="at byte"):
            _read_rows(path, monkeypatch, in_c, 65536)


def test_a_dict_section_with_many_keys_goes_to_the_python_path(monkeypatch):
    """Repeated keys are checked pairwise in C, so a large section would take quadratic time there; it is
    handed back whole. The Python rows are the rows either way."""
    tensor = {"type": "torch.Tensor", "dtype": "torch.float32", "shape": [2], "Max": 1.5, "Min": -0.5,
              "Mean": 0.25, "Norm": 2.0}  # fmt: skip
    small = {f"k{index}": tensor for index in range(64)}
    large = {f"k{index}": tensor for index in range(20_000)}
    members = {"Torch.small.0.forward": {"input_kwargs": small}, "Torch.large.0.forward": {"input_kwargs": large}}
    text = ", ".join(f"{json.dumps(name)}: {json.dumps(value)}" for name, value in members.items()).encode()
    found, names, handed = [], [], []
    commas, _ = _jsonscan.member_ends(text, 0)
    rows.c_rows.parse_rows(text, 0, len(text), commas, found, names, lambda first, end: handed.append(text[first:end]))
    assert names == ["Torch.small.0.forward"]
    assert len(found) == 64
    assert [json.loads(b"{" + member + b"}") for member in handed] == [
        {"Torch.large.0.forward": {"input_kwargs": large}}
    ]
