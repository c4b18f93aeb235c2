"""Compare without any framework: statistics and md5 modes, result files, advisor, bad input."""

import json
import shutil

import pandas as pd
import pytest
from click.testing import CliRunner
from repo_paths import REFERENCE_DUMPS

from msprobe.cli.main import cli
from msprobe.core.compare.pipeline import compare_dumps
from msprobe.core.compare.run import compare, compare_distributed, run_compare_json
from msprobe.core.compare.tables import STATISTICS_COLUMNS
from msprobe.core.dump.reader import read_dump
from msprobe.core.errors import DataFileError

STATS_L1 = REFERENCE_DUMPS / "pytorch" / "statistics_L1"


def json_of(step, kind="statistics_L1"):
    return REFERENCE_DUMPS / "pytorch" / kind / f"step{step}" / "rank" / "dump.json"


def test_a_dump_against_itself_passes_with_every_row_matched(tmp_path):
    summary = compare({"npu_json_path": str(json_of(0)), "bench_json_path": str(json_of(0))}, tmp_path)
    assert summary.verdict == "PASS" and summary.unmatched == 0 and summary.mode == "statistics"
    csv = next(tmp_path.glob("compare_result_*.csv"))
    table = pd.read_csv(csv, keep_default_na=False)
    # no stack_path and a stack.json beside the NPU dump: the reference adds the stack column, -s or not
    assert list(table.columns) == [*STATISTICS_COLUMNS, "NPU_Stack_Info"]
    tensors = table["NPU Dtype"].str.startswith("torch.")
    assert (table.loc[tensors, "Max diff"].astype(float) == 0).all() and (table["Result"] == "").all()
    # values that are not numbers (None, bool, text) get N/A, as in the reference's table
    assert set(table.loc[~tensors, "Max diff"]) <= {"0", "0.0", "N/A"}
    assert next(tmp_path.glob("compare_result_*.xlsx")).stat().st_size > 0
    assert "the runs do not part ways" in next(tmp_path.glob("advisor_*.txt")).read_text()


def test_statistics_values_are_the_dumps_differences(tmp_path):
    npu, bench = read_dump(json_of(1)), read_dump(json_of(0))
    result = compare_dumps(npu, bench)
    row = result.table.set_index("NPU Name").loc["Functional.conv2d.0.forward.input.0"]
    theirs = bench.data["Functional.conv2d.0.forward"]["input_args"][0]
    ours = npu.data["Functional.conv2d.0.forward"]["input_args"][0]
    assert row["Max diff"] == pytest.approx(ours["Max"] - theirs["Max"])
    assert row["L2norm diff"] == pytest.approx(ours["Norm"] - theirs["Norm"])
    relative = abs((ours["Mean"] - theirs["Mean"]) / theirs["Mean"]) * 100
    assert float(row["MeanRelativeErr"].rstrip("%")) == pytest.approx(relative)
    assert row["NPU Tensor Shape"] == "[4, 3, 8, 8]"
    integer = result.table.set_index("NPU Name").loc["Functional.conv2d.0.forward.input.3.0"]
    assert integer["NPU Dtype"] == "<class 'int'>" and integer["Max diff"] == 0  # the reference's dtype text


def test_unmatched_entries_are_listed_not_dropped(tmp_path):
    mix = REFERENCE_DUMPS / "pytorch" / "statistics_mix" / "step0" / "rank" / "dump.json"
    result = compare_dumps(read_dump(json_of(0)), read_dump(mix))
    table = result.table
    bench_only = table[table["NPU Name"] == "N/A"]["Bench Name"].tolist()
    assert any(name.startswith("Module.conv.Conv2d.forward.0") for name in bench_only)
    assert any(name.startswith("Tensor.view_as.0.forward") for name in bench_only)


def test_fuzzy_match_ignores_call_counts(tmp_path):
    data = json.loads(json_of(0).read_text())
    renamed = {name.replace("Functional.relu.0.", "Functional.relu.7."): entry for name, entry in data["data"].items()}
    (tmp_path / "dump.json").write_text(json.dumps({**data, "data": renamed}))
    exact = compare_dumps(read_dump(tmp_path / "dump.json"), read_dump(json_of(0)))
    fuzzy = compare_dumps(read_dump(tmp_path / "dump.json"), read_dump(json_of(0)), fuzzy=True)
    assert (exact.table["Bench Name"] == "N/A").sum() > 0
    assert (fuzzy.table["Bench Name"] == "N/A").sum() == 0


def _with_md5(data: dict) -> dict:
    """The dump with one CRC, 0badf00d, on every tensor."""
    for entry in data["data"].values():
        for leaf in entry.get("input_args", []) + entry.get("output", []) + entry.get("input", []):
            if isinstance(leaf, dict) and "dtype" in leaf:
                leaf["md5"] = "0badf00d"
    return data


def test_md5_mode(tmp_path):
    data = _with_md5(json.loads(json_of(0).read_text()))
    (tmp_path / "a").mkdir()
    (tmp_path / "a" / "dump.json").write_text(json.dumps(data))
    data["data"]["Functional.relu.0.forward"]["output"][0]["md5"] = "12345678"
    (tmp_path / "b").mkdir()
    (tmp_path / "b" / "dump.json").write_text(json.dumps(data))
    result = compare_dumps(read_dump(tmp_path / "b" / "dump.json"), read_dump(tmp_path / "a" / "dump.json"))
    assert result.mode == "md5"
    table = result.table.set_index("NPU Name")
    assert table.loc["Functional.relu.0.forward.output.0", "Result"] == "Different"
    assert table.loc["Functional.relu.0.forward.input.0", "Result"] == "pass"  # the reference's spelling


def test_md5_an_npu_value_without_partner_shows_no_crc(tmp_path):
    """The reference 1.2.2 fills NPU MD5, BENCH MD5 and Result of an unmatched NPU value with N/A."""
    data = _with_md5(json.loads(json_of(0).read_text()))
    (tmp_path / "a").mkdir()
    (tmp_path / "a" / "dump.json").write_text(json.dumps(data))
    del data["data"]["Functional.relu.0.forward"]
    (tmp_path / "b").mkdir()
    (tmp_path / "b" / "dump.json").write_text(json.dumps(data))
    table = compare_dumps(read_dump(tmp_path / "a" / "dump.json"), read_dump(tmp_path / "b" / "dump.json")).table
    alone = table.set_index("NPU Name").loc["Functional.relu.0.forward.output.0"]
    assert (alone["Bench Name"], alone["NPU MD5"], alone["BENCH MD5"], alone["Result"]) == ("N/A",) * 4
    paired = table.set_index("NPU Name").loc["Functional.conv2d.0.forward.output.0"]
    assert (paired["NPU MD5"], paired["Result"]) == ("0badf00d", "pass")


def _stack_table(tmp_path, spec, *flags):
    config = tmp_path / "compare.json"
    config.write_text(json.dumps({"npu_path": str(json_of(0)), "bench_path": str(json_of(1)), **spec}))
    out = tmp_path / "out"
    result = CliRunner().invoke(cli, ["compare", "-i", str(config), "-o", str(out), "-c", *flags])
    assert result.exit_code in (0, 1), result.output
    table = pd.read_csv(next(out.glob("compare_result_*.csv")), keep_default_na=False, dtype=str)
    shutil.rmtree(out)
    return table


def test_the_stack_column_follows_the_references_rule_and_form(tmp_path):
    """With no stack_path the column comes whenever stack.json lies beside the NPU dump; with one, -s decides.
    Its cell, as the reference writes it: the text of the frames list on a call's first (input) row, "None" on
    the call's other rows."""
    stacks = json.loads((json_of(0).parent / "stack.json").read_text())
    for spec, flags, wanted in [
        ({}, (), True),
        ({}, ("-s",), True),
        ({"stack_path": str(json_of(0).parent / "stack.json")}, (), False),
        ({"stack_path": str(json_of(0).parent / "stack.json")}, ("-s",), True),
    ]:
        table = _stack_table(tmp_path, spec, *flags)
        assert ("NPU_Stack_Info" in table.columns) == wanted, (spec, flags)
    rows = table[table["NPU Name"].str.startswith("Functional.conv2d.0.forward.")]
    assert rows["NPU_Stack_Info"].tolist() == [str(stacks["Functional.conv2d.0.forward"])] + ["None"] * (len(rows) - 1)
    assert len(rows) > 2 and rows.iloc[0]["NPU Name"].endswith(".input.0")


def test_a_stack_path_that_names_no_file_is_one_clear_error(tmp_path):
    config = tmp_path / "compare.json"
    config.write_text(json.dumps({"npu_path": str(json_of(0)), "bench_path": str(json_of(1)),
                                  "stack_path": str(tmp_path / "missing.json")}))  # fmt: skip
    result = CliRunner().invoke(cli, ["compare", "-i", str(config), "-o", str(tmp_path / "out"), "-s"])
    assert result.exit_code == 2 and "Traceback" not in result.output
    assert "missing.json" in result.output and "stack_path" in result.output


def test_multi_rank_step_folders(tmp_path):
    for side in ("npu", "bench"):
        for rank in ("rank0", "rank1"):
            shutil.copytree(STATS_L1 / "step0" / "rank", tmp_path / side / rank)
    summaries = compare_distributed(tmp_path / "npu", tmp_path / "bench", tmp_path / "out")
    assert sorted(s.rank for s in summaries) == ["0", "1"] and all(s.verdict == "PASS" for s in summaries)
    assert len(list((tmp_path / "out").glob("compare_result_rank0_*.xlsx"))) == 1
    assert len(list((tmp_path / "out").glob("compare_result_rank1_*.csv"))) == 1
    assert len(list((tmp_path / "out").glob("advisor_rank*_*.txt"))) == 2


def test_a_multi_rank_compare_ends_with_the_verdict_over_all_ranks(tmp_path):
    """Ranks 0 and 2 compare a step with itself; rank 1 against the next step, whose values differ."""
    for rank in ("rank0", "rank1", "rank2"):
        shutil.copytree(STATS_L1 / "step0" / "rank", tmp_path / "npu" / rank)
        shutil.copytree(STATS_L1 / ("step1" if rank == "rank1" else "step0") / "rank", tmp_path / "bench" / rank)
    spec = tmp_path / "compare.json"
    spec.write_text(json.dumps({"npu_path": str(tmp_path / "npu"), "bench_path": str(tmp_path / "bench")}))
    result = run_cli("compare", "-i", str(spec), "-o", str(tmp_path / "out"), "-c")
    assert result.exit_code == 1
    last = result.output.strip().splitlines()[-1]
    assert last.startswith("overall: SUSPICIOUS: 2 of 3 ranks pass; not passing: rank 1 (SUSPICIOUS); worst: rank 1")
    shutil.rmtree(tmp_path / "bench" / "rank1")
    shutil.copytree(STATS_L1 / "step0" / "rank", tmp_path / "bench" / "rank1")
    result = run_cli("compare", "-i", str(spec), "-o", str(tmp_path / "out2"), "-c")
    assert result.exit_code == 0 and result.output.strip().splitlines()[-1] == "overall: PASS: all 3 ranks pass"


def test_a_killed_dump_can_be_compared(tmp_path):
    folder = tmp_path / "killed"
    folder.mkdir()
    data = json.loads(json_of(0).read_text())
    lines = [json.dumps(["header", "", {k: v for k, v in data.items() if k != "data"}])]
    lines += [json.dumps(["data", name, entry]) for name, entry in list(data["data"].items())[:4]]
    (folder / ".dump.json.journal").write_text("\n".join(lines) + '\n["data", "cut sh')
    summary = compare({"npu_json_path": str(folder / "dump.json"), "bench_json_path": str(json_of(0))}, tmp_path)
    assert summary.verdict == "PASS"
    assert summary.unmatched > 0  # the entries the killed run never reached


def run_cli(*args):
    return CliRunner().invoke(cli, list(args), prog_name="msprobe")


@pytest.mark.parametrize(
    "content, message",
    [
        ("{", "compare.json: invalid JSON"),
        ('{"npu_path": "x"}', "bench_path: required field is missing"),
        ('{"npu_path": "a", "bench_path": "b", "stak_path": "c"}', "stak_path: unknown key"),
        ('{"npu_path": "/nonexistent/dump.json", "bench_path": "b"}', "/nonexistent/dump.json: dump.json not found"),
    ],
)
def test_bad_compare_json_is_one_clear_line(tmp_path, content, message):
    spec = tmp_path / "compare.json"
    spec.write_text(content)
    result = run_cli("compare", "-i", str(spec), "-o", str(tmp_path / "out"))
    assert result.exit_code == 2  # bad input, never 1 (the runs differ)
    assert message in result.output and "Traceback" not in result.output
    assert not list((tmp_path / "out").glob("compare_result_*")) if (tmp_path / "out").exists() else True


@pytest.mark.parametrize(
    "content, message",
    [("[]", "not a dump.json"), ('{"data": {"x": 3}}', "entry 'x' is not an object"), ("{", "invalid JSON")],
)
def test_malformed_dump_json_names_the_file(tmp_path, content, message):
    (tmp_path / "dump.json").write_text(content)
    with pytest.raises(DataFileError, match=message) as info:
        read_dump(tmp_path / "dump.json")
    assert str(tmp_path / "dump.json") in str(info.value)


def test_cli_verdict_line_and_exit_code(tmp_path):
    spec = tmp_path / "compare.json"
    spec.write_text(json.dumps({"npu_path": str(json_of(0)), "bench_path": str(json_of(0))}))
    result = run_cli("compare", "-i", str(spec), "-o", str(tmp_path / "out"))
    assert result.exit_code == 0 and "PASS: " in result.output
    result = run_compare_json(spec, tmp_path / "out2", compare_only=True)
    assert result[0].diagnosis is None and not list((tmp_path / "out2").glob("advisor_*"))


def test_nothing_matched_is_no_data_with_exit_2(tmp_path):
    """An empty side compares nothing: the verdict says so and the command fails (it used to say PASS)."""
    empty = tmp_path / "empty.json"
    empty.write_text(json.dumps({"task": "statistics", "level": "L1", "data": {}}))
    config = tmp_path / "compare.json"
    config.write_text(json.dumps({"npu_path": str(json_of(0)), "bench_path": str(empty)}))
    result = CliRunner().invoke(cli, ["compare", "-i", str(config), "-o", str(tmp_path / "out")])
    assert result.exit_code == 2, result.output
    assert "NO DATA: 0 values compared" in result.output


@pytest.mark.parametrize(
    ("change", "expected"),
    [
        (lambda entry: entry.update(input_args=None), "entry 'Functional.conv2d.0.forward', field 'input_args'"),
        (lambda entry: entry["output"][0].update(shape="abc"), "field 'shape'"),
        (lambda entry: entry["output"][0].update(Max=[1]), "field 'Max'"),
    ],
)
def test_a_dump_that_breaks_the_schema_is_an_error_naming_file_entry_and_field(tmp_path, change, expected):
    data = json.loads(json_of(0).read_text())
    change(data["data"]["Functional.conv2d.0.forward"])
    broken = tmp_path / "dump.json"
    broken.write_text(json.dumps(data))
    config = tmp_path / "compare.json"
    config.write_text(json.dumps({"npu_path": str(broken), "bench_path": str(json_of(0))}))
    result = CliRunner().invoke(cli, ["compare", "-i", str(config), "-o", str(tmp_path / "out")])
    assert result.exit_code != 0 and str(broken) in result.output and expected in result.output, result.output
    assert "Traceback" not in result.output and not list((tmp_path / "out").glob("compare_result_*"))


def test_a_26x_dump_folder_is_read_proc_folder_and_grouped_stacks_included(tmp_path):
    """mindstudio-probe 26.x writes proc{pid} where there is no rank, and groups names sharing a stack."""
    for side, step in (("npu", "step0"), ("bench", "step1")):
        source = REFERENCE_DUMPS / "pytorch" / "statistics_L1" / step / "rank"
        folder = tmp_path / side / f"proc{1000 if side == 'npu' else 2000}"
        shutil.copytree(source, folder)
        stacks = json.loads((folder / "stack.json").read_text())
        grouped = {str(i): [[name], frames] for i, (name, frames) in enumerate(stacks.items())}
        (folder / "stack.json").write_text(json.dumps(grouped))
    dump = read_dump(tmp_path / "npu" / "proc1000")
    original = REFERENCE_DUMPS / "pytorch" / "statistics_L1" / "step0" / "rank" / "stack.json"
    name = "Functional.conv2d.0.forward"
    assert dump.stack[name] == json.loads(original.read_text())[name]
    [summary] = compare_distributed(tmp_path / "npu", tmp_path / "bench", tmp_path / "out")
    assert summary.unmatched == 0 and summary.rows > 50


def test_tensor_mode_an_npu_value_without_partner_shows_the_references_cells(tmp_path):
    """The reference 1.2.2 writes "unsupported" in the five metric columns, "None" for the verdict and -1 for the
    file of an NPU value with no bench partner (seen in its own tables of a mixture of experts, whose experts are
    called a different number of times per step)."""
    import numpy as np

    from msprobe.core.compare.tables import tensor_loader
    from msprobe.core.tensor_files import load_npy

    def write(folder, names):
        (folder / "dump_tensor_data").mkdir(parents=True)
        data = {}
        for name in names:
            np.save(folder / "dump_tensor_data" / f"{name}.output.0.npy", np.arange(3, dtype=np.float32))
            summary = {"type": "mindspore.Tensor", "dtype": "Float32", "shape": [3], "Max": 2.0, "Min": 0.0,
                       "Mean": 1.0, "Norm": 2.236068, "data_name": f"{name}.output.0.npy"}  # fmt: skip
            data[name] = {"input_args": [], "input_kwargs": {}, "output": [summary]}
        (folder / "dump.json").write_text(json.dumps({"task": "tensor", "level": "L1", "framework": "mindspore",
                                                      "data": data}))  # fmt: skip
        return read_dump(folder)

    npu = write(tmp_path / "npu", ["Mint.abs.0.forward", "Mint.abs.1.forward"])
    bench = write(tmp_path / "bench", ["Mint.abs.0.forward"])
    table = compare_dumps(npu, bench, load=tensor_loader({".npy": load_npy})).table
    alone = table[table["NPU Name"] == "Mint.abs.1.forward.output.0"].iloc[0]
    assert [alone[c] for c in ("Cosine", "MaxAbsErr", "MaxRelativeErr")] == ["unsupported"] * 3
    assert (alone["Accuracy Reached or Not"], alone["Err_message"], alone["Data_name"]) == (
        "None",
        "No bench data matched.",
        "-1",
    )
    paired = table[table["NPU Name"] == "Mint.abs.0.forward.output.0"].iloc[0]
    assert paired["Cosine"] == 1.0 and paired["Data_name"] == "Mint.abs.0.forward.output.0.npy"
