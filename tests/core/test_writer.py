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
    journal = (tmp_path / JOURNAL_NAME).read_bytes()
    # the header first; a live (or killed) writer's journal ends in the zero bytes of its reserved space
    assert len(journal.rstrip(b"\0").splitlines()) == 1 + 3 + 3 + 1
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


def test_a_journal_larger_than_its_first_reservation_is_recovered_whole(tmp_path):
    writer = DumpWriter(tmp_path, {"task": "statistics", "level": "L1", "framework": "pytorch", "dump_data_dir": None})
    entry = {"output": [{"type": "torch.Tensor", "dtype": "torch.float32", "shape": [8], "Max": 1.5, "Min": -0.5}]}
    names = [f"Functional.relu.{index}.forward" for index in range(12000)]  # about 2.5 MB of journal
    for name in names:
        writer.add(name, entry, stack=["File a.py, line 1"])
    dump = read_dump(tmp_path)  # as a killed process would leave it: no dump.json yet
    assert dump.recovered and list(dump.data) == names and dump.data[names[-1]] == entry
    writer.close()
    assert list(read_dump(tmp_path).data) == names


def test_without_memory_maps_the_journal_writes_through_the_file(tmp_path, monkeypatch):
    import msprobe.core.dump.writer as writer_module

    def refuse(*args):
        raise OSError(95, "Operation not supported")

    writer_module._SPARE_JOURNAL.drop()  # a journal parked by an earlier test would be reused
    monkeypatch.setattr(writer_module.os, "posix_fallocate", refuse)
    writer = DumpWriter(tmp_path, {"task": "statistics", "level": "L1", "framework": "pytorch", "dump_data_dir": None})
    writer.add("Functional.relu.0.forward", {"output": []})
    assert (tmp_path / JOURNAL_NAME).read_bytes().endswith(b"]\n")  # no reserved space: the file is exact
    assert list(read_dump(tmp_path).data) == ["Functional.relu.0.forward"]
    writer.close()


def _header(task="statistics"):
    return {"task": task, "level": "L1", "framework": "pytorch", "dump_data_dir": None}


def test_the_next_step_reuses_the_finished_steps_journal_emptied(tmp_path):
    import os

    import msprobe.core.dump.writer as writer_module

    writer_module._SPARE_JOURNAL.drop()
    first = DumpWriter(tmp_path / "step0", _header())
    for index in range(500):
        first.add(f"Functional.relu.{index}.forward", {"output": []}, stack=["File a.py, line 1"])
    inode = os.stat(tmp_path / "step0" / JOURNAL_NAME).st_ino
    first.close()
    assert not (tmp_path / "step0" / JOURNAL_NAME).exists()
    assert list(read_dump(tmp_path / "step0").data)[-1] == "Functional.relu.499.forward"
    (spare,) = (tmp_path / "step0").glob(".msprobe-spare-journal-*")
    assert spare.read_bytes().strip(b"\0") == b""  # parked empty: nothing of step 0 can leak into step 1

    second = DumpWriter(tmp_path / "step1", _header("md5"))
    second.add("Functional.gelu.0.forward", {"output": []})
    assert os.stat(tmp_path / "step1" / JOURNAL_NAME).st_ino == inode and not spare.exists()
    recovered = read_dump(tmp_path / "step1")  # as a process killed now would leave it
    assert recovered.recovered and recovered.task == "md5" and list(recovered.data) == ["Functional.gelu.0.forward"]
    second.close()
    assert list(read_dump(tmp_path / "step1").data) == ["Functional.gelu.0.forward"]

    writer_module._SPARE_JOURNAL.drop()  # at exit: the parked file goes
    assert not list((tmp_path / "step1").glob(".msprobe-spare-journal-*"))


def test_a_forked_child_leaves_the_parents_parked_journal_alone(tmp_path):
    import os

    import msprobe.core.dump.writer as writer_module

    writer_module._SPARE_JOURNAL.drop()
    writer = DumpWriter(tmp_path / "step0", _header())
    writer.add("Functional.relu.0.forward", {"output": []})
    writer.close()
    (spare,) = (tmp_path / "step0").glob(".msprobe-spare-journal-*")
    pid = os.fork()
    if pid == 0:  # the child starts a journal of its own and exits without running atexit
        child = DumpWriter(tmp_path / "child", _header())
        child.add("Functional.gelu.0.forward", {"output": []})
        os._exit(0 if (tmp_path / "child" / JOURNAL_NAME).exists() and spare.exists() else 1)
    _, status = os.waitpid(pid, 0)
    assert os.waitstatus_to_exitcode(status) == 0
    assert spare.exists()
    parent = DumpWriter(tmp_path / "step1", _header())
    parent.add("Functional.relu.0.forward", {"output": []})
    assert not spare.exists()  # the parent's own spare, still there for it
    parent.close()
    writer_module._SPARE_JOURNAL.drop()


def test_deferred_entries_reach_the_journal_when_settled_with_the_values_they_hold_then(tmp_path):
    writer = DumpWriter(
        tmp_path, {"task": "statistics", "level": "L1", "framework": "mindspore", "dump_data_dir": None}
    )
    summary = {"Max": None}
    writer.add("Mint.abs.0.forward", {"output": [summary]}, deferred=True, stack=["File a.py, line 1"])
    assert read_dump(tmp_path).data == {}  # its values are not known yet: not journaled
    summary["Max"] = 3.0  # read late, filled in place
    writer.settle()
    writer.add("Mint.neg.0.forward", {"output": [{"Max": None}]}, deferred=True)
    recovered = read_dump(tmp_path)
    assert recovered.data == {"Mint.abs.0.forward": {"output": [{"Max": 3.0}]}}
    writer.close()
    assert list(read_dump(tmp_path).data) == ["Mint.abs.0.forward", "Mint.neg.0.forward"]


def test_a_damaged_journal_is_replayed_past_the_damage_and_says_what_was_lost(tmp_path, caplog):
    writer = DumpWriter(tmp_path, {"task": "statistics", "level": "L1", "framework": "pytorch", "dump_data_dir": None})
    for index in range(3):
        writer.add(f"Torch.add.{index}.forward", {"output": []})
    journal = tmp_path / JOURNAL_NAME
    lines = journal.read_bytes().rstrip(b"\0").splitlines(keepends=True)
    damaged = [line if b"Torch.add.1" not in line else b'["data", "Torch.add.1.forw\xff\n' for line in lines]
    journal.write_bytes(b"".join(damaged) + b'["data", "Torch.add.9.forward", {"out')  # killed mid-line
    dump = read_dump(tmp_path)
    assert list(dump.data) == ["Torch.add.0.forward", "Torch.add.2.forward"]  # the line after the damage too
    assert "2 entries recovered; 2 journal lines could not be read and are lost" in caplog.text


def test_a_killed_writers_journal_reports_no_loss(tmp_path, caplog):
    writer = DumpWriter(tmp_path, {"task": "statistics", "level": "L1", "framework": "pytorch", "dump_data_dir": None})
    writer.add("Torch.add.0.forward", {"output": []})
    assert list(read_dump(tmp_path).data) == ["Torch.add.0.forward"]
    assert "could not be read" not in caplog.text


def _killed_step(folder):
    """A step whose process died before dump.json: only its journal is there."""
    writer = DumpWriter(folder, {"task": "statistics", "level": "mix", "framework": "pytorch", "dump_data_dir": None})
    writer.add("Module.fc.Linear.forward.0", {"output": []}, stack=["File a.py, line 1"], parent=None)
    entry = {"input_args": [{"type": "torch.Tensor", "dtype": "torch.float32", "shape": [2], "Max": 1.0}]}
    writer.add("Functional.relu.0.forward", entry, stack=["File a.py, line 2"], parent="Module.fc.Linear.forward.0")
    return writer


def test_recover_turns_a_killed_steps_journal_into_ordinary_files(tmp_path):
    import json

    from click.testing import CliRunner

    from msprobe.cli.main import cli

    folder = tmp_path / "step0" / "rank0"
    folder.mkdir(parents=True)
    _killed_step(folder)
    result = CliRunner().invoke(cli, ["recover", str(tmp_path / "step0")])
    assert result.exit_code == 0 and "2 entries recovered" in result.output, result.output
    assert not (folder / JOURNAL_NAME).exists()
    dump = json.loads((folder / "dump.json").read_text())
    assert dump["task"] == "statistics" and list(dump["data"]) == [
        "Module.fc.Linear.forward.0",
        "Functional.relu.0.forward",
    ]
    assert (
        json.loads((folder / "construct.json").read_text())["Functional.relu.0.forward"] == "Module.fc.Linear.forward.0"
    )
    again = CliRunner().invoke(cli, ["recover", str(tmp_path / "step0")])
    assert again.exit_code != 0 and "holds no journal" in again.output


def test_graph_reads_a_killed_step(tmp_path):
    import json

    from click.testing import CliRunner

    from msprobe.cli.main import cli

    folder = tmp_path / "rank"
    folder.mkdir()
    _killed_step(folder)
    (tmp_path / "compare.json").write_text(json.dumps({"npu_path": str(folder)}))
    result = CliRunner().invoke(cli, ["graph", "-i", str(tmp_path / "compare.json"), "-o", str(tmp_path / "g")])
    assert result.exit_code == 0, result.output
    assert list((tmp_path / "g").glob("*.vis"))


def test_a_write_that_fails_leaves_no_temporary_behind(tmp_path, monkeypatch):
    import errno

    import pytest

    from msprobe.core import files as file_module

    writer = DumpWriter(tmp_path, {"task": "statistics", "level": "L1", "framework": "pytorch", "dump_data_dir": None})
    writer.add("Torch.add.0.forward", {"output": []})
    real_writable = file_module.writable

    class FullDisk:
        def __init__(self, handle):
            self.handle = handle

        def __enter__(self):
            return self

        def __exit__(self, *exc):
            self.handle.close()

        def write(self, data):
            raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(file_module, "writable", lambda fd: FullDisk(real_writable(fd)))
    with pytest.raises(OSError):
        writer.close()
    assert not [path.name for path in tmp_path.iterdir() if path.name.endswith(".tmp")]
