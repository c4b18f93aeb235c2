"""Entries written before their values: tokens in the text, filled in when the values come."""

import gc
import json
import math

from msprobe.core.dump.numbers import json_number
from msprobe.core.dump.pending_values import PLACEHOLDERS, TOKEN, Placeholders, WaitingText
from msprobe.core.dump.reader import read_dump
from msprobe.core.dump.writer import JOURNAL_NAME, DumpWriter, encode_json


class Later:
    """A value measured on a device: known only once its batch is read back (``ready``)."""

    def __init__(self, value):
        self.value, self.ready, self.asked = value, False, 0

    def resolve(self):
        self.asked += 1
        return json_number(self.value)


def _header():
    return {"task": "statistics", "level": "L1", "framework": "pytorch", "dump_data_dir": None}


def test_each_token_is_replaced_by_its_values_json_once():
    table = Placeholders()
    first, second = table.token(Later(1.5)), table.token(Later(math.inf))
    assert TOKEN.fullmatch(first) and first != second
    text = f'{{"Max":{first},"Min":{second},"s":"\\u0001"}}'  # an escaped control character is no token
    assert len(table) == 2
    filled = table.fill(text, encode_json)
    assert json.loads(filled) == {"Max": 1.5, "Min": math.inf, "s": "\x01"}
    assert filled == '{"Max":1.5,"Min":Infinity,"s":"\\u0001"}'  # as the writer writes an inf
    assert len(table) == 0  # nothing left waiting


def test_an_entry_replaced_before_it_was_filled_lets_go_of_its_values():
    before = len(PLACEHOLDERS)
    waiting = WaitingText(f"[{PLACEHOLDERS.token(Later(1))},{PLACEHOLDERS.token(Later(2))}]")
    assert len(PLACEHOLDERS) == before + 2
    del waiting
    gc.collect()
    assert len(PLACEHOLDERS) == before


def test_a_waiting_entry_is_journaled_with_its_values_when_settled_and_keeps_its_place(tmp_path):
    writer = DumpWriter(tmp_path, _header())
    writer.add("Functional.relu.0.forward", {"output": []}, stack=["File a.py, line 1"])
    value = Later(0.25)
    writer.add_waiting(
        "Functional.gelu.0.forward",
        '"Functional.gelu.0.forward"',
        f'{{"output":[{{"Max":{PLACEHOLDERS.token(value)}}}]}}',
        '["File a.py, line 2"]',
        None,
    )
    writer.add("Functional.add.0.forward", {"output": []})
    journal = (tmp_path / JOURNAL_NAME).read_bytes()
    assert b"\x01" not in journal and journal.count(b"Functional.gelu.0.forward") == 1  # its stack only, so far
    assert value.asked == 0
    writer.settle()  # the batch was read back
    assert value.asked == 1
    recovered = read_dump(tmp_path)  # killed now: the journal holds it whole
    assert recovered.data["Functional.gelu.0.forward"] == {"output": [{"Max": 0.25}]}
    writer.close()
    dump = read_dump(tmp_path)
    assert list(dump.data) == ["Functional.relu.0.forward", "Functional.gelu.0.forward", "Functional.add.0.forward"]
    assert dump.data["Functional.gelu.0.forward"] == {"output": [{"Max": 0.25}]}
    assert dump.stack["Functional.gelu.0.forward"] == ["File a.py, line 2"]


def test_closing_fills_what_was_never_settled(tmp_path):
    writer = DumpWriter(tmp_path, _header())
    value = Later(-3.0)
    writer.add_waiting(
        "Tensor.add_.0.forward", '"Tensor.add_.0.forward"', f'{{"x":{PLACEHOLDERS.token(value)}}}', None, None
    )
    writer.close()
    assert read_dump(tmp_path).data["Tensor.add_.0.forward"] == {"x": -3.0}
    assert b"\x01" not in (tmp_path / "dump.json").read_bytes()


def test_a_token_value_with_its_own_text_is_written_as_it_says():
    class Members:
        def json_text(self):
            return '"Max":1.0,"Min":0.0'

    table = Placeholders()
    assert table.fill("{" + table.token(Members()) + "}", lambda value: value.json_text()) == '{"Max":1.0,"Min":0.0}'
