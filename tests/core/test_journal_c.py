"""The C journal write (``_journal.c``), which other packages' C calls per entry, against DumpWriter.add_journaled,
the Python it stands in for: the same tables and the same journal bytes, and every case it cannot do left to
Python untouched."""

from __future__ import annotations

import json
import os

import pytest

import msprobe.core.dump.writer as writer_module
from msprobe.core.dump.reader import read_dump
from msprobe.core.dump.writer import JOURNAL_NAME, DumpWriter, encode_json

if os.environ.get("MSPROBE_REQUIRE_EXTENSIONS") == "1":  # CI: not built is a failure, not a skip
    from msprobe.core.dump import _journal
else:
    _journal = pytest.importorskip("msprobe.core.dump._journal", reason="msprobe-core was built without a C compiler")

HEADER = {"task": "statistics", "level": "mix", "framework": "pytorch", "dump_data_dir": None}
ENTRY = '{"output": [{"type": "torch.Tensor", "dtype": "torch.float32", "shape": [2], "Max": 1.5}]}'


def _writer(folder, extra_info=True):
    writer_module._SPARE_JOURNAL.drop()  # each writer gets a fresh journal, not one parked by an earlier test
    writer = DumpWriter(folder, HEADER, extra_info=extra_info)
    writer.add_encoded("Module.first.forward.0", "{}")  # the journal exists from the first entry on
    return writer


def _cases():
    """name, text, stack text, parent text: each None where there is none, as the per-call path passes them."""
    return [
        ("Functional.relu.0.forward", ENTRY, '["File a.py, line 1"]', '"Module.first.forward.0"'),
        ("Functional.relu.0.backward", ENTRY, None, None),
        ("Tensor.__add__.0.forward", ENTRY, '["File é.py, line 2"]', "null"),  # not ASCII
        ("Functional.gelu.0.forward", None, None, '"Module.first.forward.0"'),  # text later (deferred)
        ("Functional.gelu.0.forward", ENTRY, None, None),
        ('Functional.name with \\" quote.0.forward', ENTRY, "[]", None),
    ]


def _journal_bytes(folder):
    return (folder / JOURNAL_NAME).read_bytes().rstrip(b"\0")


@pytest.mark.parametrize("extra_info", [True, False])
def test_c_and_python_leave_the_same_tables_and_journal_bytes(tmp_path, extra_info):
    python_side, c_side = _writer(tmp_path / "py", extra_info), _writer(tmp_path / "c", extra_info)
    for name, text, stack_text, parent_text in _cases():
        name_text = encode_json(name)
        python_side.add_journaled(name, name_text, text, stack_text, parent_text)
        assert _journal.add_journaled(c_side, name, name_text, text, stack_text, parent_text) is True
    assert c_side.data == python_side.data and c_side.stack == python_side.stack
    assert c_side.construct == python_side.construct
    assert _journal_bytes(tmp_path / "c") == _journal_bytes(tmp_path / "py")
    # and what the journal says, read as JSON lines, is the entries as passed (expectation from the cases table)
    lines = [json.loads(line) for line in _journal_bytes(tmp_path / "c").decode().splitlines()[2:]]
    expected = []
    for name, text, stack_text, parent_text in _cases():
        for kind, value in (("data", text), ("stack", stack_text), ("construct", parent_text)):
            if value is not None and (kind == "data" or extra_info):
                expected.append([kind, name, json.loads(value)])
    assert lines == expected
    for writer in (c_side, python_side):
        writer.close()
    assert read_dump(tmp_path / "c").data == read_dump(tmp_path / "py").data


def test_lines_past_the_reserved_mapping_go_through_the_journals_own_write(tmp_path):
    c_side = _writer(tmp_path)
    big = encode_json({"output": ["x" * 4096]})
    names = [f"Functional.cat.{index}.forward" for index in range(400)]  # about 1.6 MB: past the first reservation
    for name in names:
        assert _journal.add_journaled(c_side, name, encode_json(name), big, None, None) is True
    assert list(read_dump(tmp_path).data)[1:] == names  # the journal alone, as a killed process leaves it
    c_side.close()


def test_what_it_cannot_do_is_left_to_python_untouched(tmp_path):
    writer_module._SPARE_JOURNAL.drop()
    fresh = DumpWriter(tmp_path / "fresh", HEADER)  # no journal yet: Python opens it and writes the header
    assert _journal.add_journaled(fresh, "a", '"a"', ENTRY, None, None) is False
    assert fresh.data == {} and not (tmp_path / "fresh" / JOURNAL_NAME).exists()
    failed = _writer(tmp_path / "failed")
    failed._journal_failed = True
    assert _journal.add_journaled(failed, "a", '"a"', ENTRY, None, None) is False
    assert "a" not in failed.data
    odd = _writer(tmp_path / "odd")
    assert _journal.add_journaled(odd, "a", '"a"', 3, None, None) is False  # not text: Python's to judge
    assert _journal.add_journaled(odd, 7, '"a"', ENTRY, None, None) is False
    assert list(odd.data) == ["Module.first.forward.0"]


def test_without_memory_maps_it_writes_through_the_file(tmp_path, monkeypatch):
    def refuse(*args):
        raise OSError(95, "Operation not supported")

    monkeypatch.setattr(writer_module.os, "posix_fallocate", refuse)
    writer = _writer(tmp_path)
    assert _journal.add_journaled(writer, "b", '"b"', ENTRY, None, None) is True
    assert (tmp_path / JOURNAL_NAME).read_bytes().endswith(b'["data", "b", ' + ENTRY.encode() + b"]\n")


def test_the_attributes_it_reads_exist_on_a_real_writer_and_journal(tmp_path):
    """A rename in writer.py fails here rather than sending every entry to the Python path unnoticed."""
    writer = _writer(tmp_path)
    owners = {"writer": writer, "journal": writer._journal}
    missing = [
        f"{owner}.{name}"
        for owner, names in _journal.READS.items()
        for name in names
        if not hasattr(owners[owner], name)
    ]
    assert missing == []
    assert type(writer._journal).__name__ == "_MappedJournal"


def test_the_switch_withholds_the_capsule(monkeypatch):
    assert writer_module.journal_c_api() is not None
    monkeypatch.setattr(writer_module, "C_JOURNAL_AVAILABLE", False)
    assert writer_module.journal_c_api() is None
    monkeypatch.setattr(writer_module, "C_JOURNAL_AVAILABLE", True)
    monkeypatch.setattr(writer_module, "C_JOURNAL_VERSION", 99)  # a caller expecting another layout gets none
    assert writer_module.journal_c_api() is None
