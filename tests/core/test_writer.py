"""The step folder's writer: an entry, its stack and its parent reach the journal together."""

from msprobe.core.dump.reader import read_dump
from msprobe.core.dump.writer import JOURNAL_NAME, DumpWriter


def test_entry_stack_and_parent_are_journaled_in_one_write_and_recovered_without_dump_json(tmp_path):
    writer = DumpWriter(tmp_path, {"task": "statistics", "level": "mix", "framework": "pytorch", "dump_data_dir": None})
    writes = []
    journal_write = writer._journal.write
    writer._journal.write = lambda data: writes.append(data) or journal_write(data)
    writer.add("Module.fc.Linear.forward.0", {"output": []}, stack=["File a.py, line 1"], parent=None)
    writer.add(
        "Functional.relu.0.forward", {"output": []}, stack=["File a.py, line 2"], parent="Module.fc.Linear.forward.0"
    )
    writer.add("Functional.relu.0.backward", {"input": [], "output": []})  # no stack, no parent record
    assert len(writes) == 3 and writes[0].count(b"\n") == 3 and writes[2].count(b"\n") == 1
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
