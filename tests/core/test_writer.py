"""The step folder's writer: an entry, its stack and its parent reach the journal together."""

from msprobe.core.dump.reader import read_dump
from msprobe.core.dump.writer import JOURNAL_NAME, DumpWriter


def test_entry_stack_and_parent_are_journaled_in_one_write_and_recovered_without_dump_json(tmp_path):
    writer = DumpWriter(tmp_path, {"task": "statistics", "level": "mix", "framework": "pytorch", "dump_data_dir": None})
    assert not (tmp_path / JOURNAL_NAME).exists()  # a step that records nothing costs no file
    writer.add("Module.fc.Linear.forward.0", {"output": []}, stack=["File a.py, line 1"], parent=None)
    writes = []
    journal_write = writer._journal.write
    writer._journal.write = lambda data: writes.append(data) or journal_write(data)
    writer.add(
        "Functional.relu.0.forward", {"output": []}, stack=["File a.py, line 2"], parent="Module.fc.Linear.forward.0"
    )
    writer.add("Functional.relu.0.backward", {"input": [], "output": []})  # no stack, no parent record
    assert [data.count(b"\n") for data in writes] == [3, 1]
    assert len((tmp_path / JOURNAL_NAME).read_bytes().splitlines()) == 1 + 3 + 3 + 1  # the header first
    # killed before dump.json: the journal alone gives everything back
    dump = read_dump(tmp_path)
    assert dump.recovered and list(dump.data) == [
        "Module.fc.Linear.forward.0",
        "Functional.relu.0.forward",
        "Functional.relu.0.backward",
    ]
    assert dump.stack["Functional.relu.0.forward"] == ["File a.py, line 2"]
    assert dump.construct == {
        "Module.fc.Linear.forward.0": None,
        "Functional.relu.0.forward": "Module.fc.Linear.forward.0",
    }
    writer.close()
    assert not (tmp_path / JOURNAL_NAME).exists()
    assert read_dump(tmp_path).construct == dump.construct


def test_a_journal_that_cannot_be_created_is_reported_once_and_the_step_still_written(tmp_path, caplog):
    writer = DumpWriter(tmp_path, {"task": "statistics", "level": "L1", "framework": "pytorch", "dump_data_dir": None})
    (tmp_path / JOURNAL_NAME).mkdir()  # stands in the journal's way
    for index in range(3):
        writer.add(f"Functional.relu.{index}.forward", {"output": []})
    assert sum("journal" in record.message for record in caplog.records) == 1
    writer.close()
    assert list(read_dump(tmp_path).data) == [f"Functional.relu.{index}.forward" for index in range(3)]
