"""The streamed statistics compare: the same files as the in-memory compare, in bounded memory.

The in-memory compare is itself checked against the reference tool (tests/conformance, where the streamed
path runs too); here the streamed one must give the very same bytes on dumps holding every kind of value and
every matching case, read in blocks of a few kilobytes and split over two processes. The pieces it is built
from are checked against outside oracles: Python's json and repr, pandas' to_csv, hand-derived values.
"""

from __future__ import annotations

import io
import json
import logging
import math
import os
import random
import subprocess
import sys
import zlib

import numpy as np
import pandas as pd
import pytest
from repo_paths import REFERENCE_DUMPS

from msprobe.core import spreadsheet
from msprobe.core.compare import large
from msprobe.core.compare.metrics import statistic_columns
from msprobe.core.compare.run import compare
from msprobe.core.dump import block_reader
from msprobe.core.errors import DataFileError
from msprobe.core.floattext import float_texts
from msprobe.core.spreadsheet import safe_table, write_csv_table

FIXTURES = REFERENCE_DUMPS / "pytorch"


def fixture(kind: str, step: int):
    return FIXTURES / kind / f"step{step}" / "rank" / "dump.json"


# dumps with every kind of value and every matching case


def _tensor(rng: random.Random, shape=None, dtype="torch.float32") -> dict:
    scale = 10.0 ** rng.randint(-9, 6)
    values = [rng.uniform(-1, 1) * scale for _ in range(4)]
    summary = {"Max": values[0], "Min": values[1], "Mean": values[2], "Norm": abs(values[3]), "requires_grad": True}
    return {"type": "torch.Tensor", "dtype": dtype, "shape": shape or [rng.randint(1, 9), 4], **summary}


def _odd_value(rng: random.Random):
    """A value the fast paths do not take: text statistics, ints, None, bools, plain values, a formula."""
    choice = rng.randrange(9)
    if choice == 0:
        return {**_tensor(rng), "Max": "inf", "Min": "-inf"}
    if choice == 1:
        return {**_tensor(rng, dtype="torch.int64"), "Max": 7, "Min": -3, "Mean": 1.5, "Norm": None}
    if choice == 2:
        return None
    if choice == 3:
        return {"type": "int", "value": rng.randint(-5, 5)}
    if choice == 4:
        return {"type": "bool", "value": True}
    if choice == 5:
        return {"type": "str", "value": '=HYPERLINK("x"), "quoted"\nnext line'}
    if choice == 6:
        return {"type": "slice", "value": [0, 4, None]}
    if choice == 7:
        return {**_tensor(rng), "Max": float("nan")}
    return [_tensor(rng), {"type": "float", "value": 0.5}]


def _entries(rng: random.Random, count: int) -> dict:
    data = {}
    for index in range(count):
        name = f"Torch.op{index % 7}.{index}.forward" if index % 5 else f"Module.layer{index}.Linear.forward.0"
        inputs = [_tensor(rng) for _ in range(rng.randint(0, 3))]
        if rng.random() < 0.3:
            inputs.append(_odd_value(rng))
        entry = {"input_args": inputs, "input_kwargs": {"alpha": _odd_value(rng)} if rng.random() < 0.2 else {},
                 "output": [_tensor(rng) for _ in range(rng.randint(1, 2))]}  # fmt: skip
        if index % 97 == 3 and inputs and isinstance(inputs[0], dict):
            entry["input"] = [{**inputs[0], "Norm": 12.5}]  # a second row named {name}.input.0
        if name.startswith("Module") and rng.random() < 0.5:
            entry["parameters"] = {"weight": _tensor(rng), "bias": _tensor(rng)}
        data[name] = entry
        if name.startswith("Module") and rng.random() < 0.5:
            data[name.replace(".forward.0", ".parameters_grad")] = {"weight": [_tensor(rng)], "bias": [_tensor(rng)]}
    return data


def _perturbed(rng: random.Random, data: dict) -> dict:
    """The bench side: small and large differences, calls missing, calls added, calls of another structure."""
    bench = {}
    for name, entry in data.items():
        roll = rng.random()
        if roll < 0.05:
            continue  # NPU-only
        entry = json.loads(json.dumps(entry))
        if roll < 0.10 and entry.get("output"):
            entry["output"][0]["shape"] = [99]  # another shape: the call is unpaired
        elif roll < 0.13 and entry.get("input_args"):
            entry["input_args"].append(_tensor(rng))  # a row more
        elif roll < 0.16 and entry.get("output") and entry["output"][0].get("dtype") == "torch.float32":
            entry["output"][0]["dtype"] = "torch.float16"  # a dtype of like kind: the call stays paired
        for value in entry.get("output", []):
            if isinstance(value, dict) and isinstance(value.get("Max"), float):
                value["Max"] *= 1 + (rng.choice([1e-7, 0.2, 3.0, 1e12]) if rng.random() < 0.3 else 0)
        bench[name] = entry
        if roll > 0.97:
            bench[name.replace("forward", "backward")] = {"input_args": [_tensor(rng)], "output": [_tensor(rng)]}
    return bench


def _write(path, data: dict, indent=None) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    document = {"task": "statistics", "level": "mix", "framework": "pytorch", "dump_data_dir": None, "data": data}
    path.write_text(json.dumps(document, indent=indent))


def write_varied_pair(folder):
    rng = random.Random(20261126)
    npu = _entries(rng, 600)
    bench = _perturbed(rng, npu)
    _write(folder / "npu" / "dump.json", npu)
    _write(folder / "bench" / "dump.json", bench, indent=2)
    return folder / "npu" / "dump.json", folder / "bench" / "dump.json"


@pytest.fixture
def varied_pair(tmp_path):
    return write_varied_pair(tmp_path)


def _run(npu, bench, out, monkeypatch, mode: str, **options):
    monkeypatch.setenv(large.STREAM_ENV, mode)
    summary = compare({"npu_json_path": str(npu), "bench_json_path": str(bench)}, out, **options)
    csv = next(out.glob("compare_result_*.csv")).read_bytes()
    advice = next(out.glob("advisor_*.txt")).read_text()
    xlsx = list(out.glob("compare_result_*.xlsx"))
    return summary, csv, advice, xlsx


def _same_result(memory, streamed):
    (summary, csv, advice, _), (other, other_csv, other_advice, _) = memory, streamed
    assert (other.mode, other.rows, other.suspicious, other.unmatched, other.verdict) == (
        summary.mode, summary.rows, summary.suspicious, summary.unmatched, summary.verdict)  # fmt: skip
    assert other_csv == csv
    assert other_advice == advice


@pytest.mark.slow
@pytest.mark.parametrize("stack_mode", [False, True])
def test_streamed_files_are_the_in_memory_ones_on_varied_dumps(varied_pair, tmp_path, monkeypatch, stack_mode):
    npu, bench = varied_pair
    monkeypatch.setattr(block_reader, "BLOCK_BYTES", 4096)  # dozens of blocks
    assert len(list(block_reader.DumpStream(npu).blocks())) > 50
    memory = _run(npu, bench, tmp_path / "memory", monkeypatch, "never", stack_mode=stack_mode)
    streamed = _run(npu, bench, tmp_path / "streamed", monkeypatch, "always", stack_mode=stack_mode)
    _same_result(memory, streamed)
    summary = memory[0]
    assert summary.suspicious > 0 and 0 < summary.unmatched < summary.rows  # the dumps exercise every case
    table = pd.read_csv(io.BytesIO(memory[1]), keep_default_na=False, dtype=str)
    assert (table["NPU Name"] == "N/A").any() and (table["Bench Name"] == "N/A").any()
    assert table["Err_message"].str.contains("maximum or minimum is nan").any()
    # the xlsx holds the same cells and the same coloured rows
    ours, theirs = memory[3][0], streamed[3][0]
    assert _cells(ours).equals(_cells(theirs))
    assert _fills(ours) == _fills(theirs) and _fills(ours)


def _cells(path) -> pd.DataFrame:
    """calamine reads the cells eight times as fast as openpyxl, which these files took a minute of under the
    sanitizers; openpyxl still reads the fills and the declared size, which calamine does not."""
    return pd.read_excel(path, dtype=object, engine="calamine")


def _fills(path):
    import openpyxl

    sheet = openpyxl.load_workbook(path, read_only=True).active
    return [row[0].fill.fgColor.rgb for row in sheet.iter_rows(min_row=2, max_col=1) if row[0].fill.fill_type]


def _helper_forced(monkeypatch) -> list[str]:
    """Small blocks and a helper process whatever the size; the list fills with what each helper ran."""
    monkeypatch.setattr(block_reader, "BLOCK_BYTES", 4096)
    monkeypatch.setattr(large, "HELPER_FROM_BYTES", 0)
    monkeypatch.setattr(large, "_can_fork", lambda: True)  # other tests may leave threads in this process
    started: list[str] = []
    original = large._Forked.__init__
    monkeypatch.setattr(
        large._Forked, "__init__", lambda self, *a, **k: started.append(a[0].__name__) or original(self, *a, **k)
    )
    return started


def test_a_helper_process_takes_the_later_half(varied_pair, tmp_path, monkeypatch):
    npu, bench = varied_pair
    monkeypatch.setattr(large, "XLSX_ROW_LIMIT", 0)  # no xlsx: the CSV alone
    started = _helper_forced(monkeypatch)
    memory = _run(npu, bench, tmp_path / "memory", monkeypatch, "never")
    streamed = _run(npu, bench, tmp_path / "streamed", monkeypatch, "always")
    assert started == ["_later_bench_rows", "_later_half"]
    _same_result(memory, streamed)
    assert streamed[3] == []  # no xlsx, and nothing else left behind
    left = sorted(path.name.split("_2")[0] for path in (tmp_path / "streamed").iterdir())
    assert left == ["advisor", "compare_result"]


@pytest.mark.slow
def test_a_helper_process_writes_its_share_of_the_xlsx_too(varied_pair, tmp_path, monkeypatch):
    """Its sheet rows, numbered from 1, go after this process's renumbered: the file equals the in-memory one."""
    import openpyxl
    from openpyxl.utils import get_column_letter

    npu, bench = varied_pair
    started = _helper_forced(monkeypatch)
    memory = _run(npu, bench, tmp_path / "memory", monkeypatch, "never")
    streamed = _run(npu, bench, tmp_path / "streamed", monkeypatch, "always")
    assert started == ["_later_bench_rows", "_later_half"]
    _same_result(memory, streamed)
    ours, theirs = memory[3][0], streamed[3][0]
    cells = _cells(ours)
    assert cells.equals(_cells(theirs)) and len(cells) == memory[0].rows
    assert _fills(ours) == _fills(theirs) and _fills(ours)
    declared = [openpyxl.load_workbook(path, read_only=True).active.calculate_dimension() for path in (ours, theirs)]
    assert declared[0] == declared[1] == f"A1:{get_column_letter(cells.shape[1])}{len(cells) + 1}"
    left = sorted(path.name.split("_2")[0] for path in (tmp_path / "streamed").iterdir())
    assert left == ["advisor", "compare_result", "compare_result"]  # the csv and xlsx; no part file


def test_shifted_rows_are_renumbered_in_c_and_in_python():
    from msprobe.core.compare import xlsx

    text = xlsx.python_sheet_rows([["a<c r=", None, "b"], [1.5, 2.5, None]], 1, [0, 2, 0])
    shifted = xlsx.python_sheet_rows([["a<c r=", None, "b"], [1.5, 2.5, None]], 41, [0, 2, 0])
    assert xlsx.shift_rows(text, 40) == shifted
    monkeypatch_free = xlsx._ROW_NUMBER.sub(lambda m: m.group(1) + str(int(m.group(2)) + 40).encode(), text)
    assert monkeypatch_free == shifted


@pytest.mark.parametrize(
    ("npu", "bench"),
    [(("statistics_L1", 1), ("statistics_L1", 0)), (("statistics_L1", 0), ("statistics_mix", 0)),
     (("statistics_mix", 1), ("statistics_L1", 1)), (("statistics_mix", 1), ("statistics_mix", 0))],
)  # fmt: skip
def test_streamed_files_are_the_in_memory_ones_on_reference_dumps(npu, bench, tmp_path, monkeypatch):
    monkeypatch.setattr(block_reader, "BLOCK_BYTES", 2048)
    npu_json, bench_json = fixture(*npu), fixture(*bench)
    memory = _run(npu_json, bench_json, tmp_path / "memory", monkeypatch, "never", stack_mode=True)
    streamed = _run(npu_json, bench_json, tmp_path / "streamed", monkeypatch, "always", stack_mode=True)
    _same_result(memory, streamed)


def test_tensor_pairs_go_to_the_in_memory_compare(tmp_path, monkeypatch):
    data = json.loads(fixture("statistics_L1", 0).read_text())["data"]
    tensors = tmp_path / "tensor" / "dump.json"
    _write(tensors, data)
    tensors.write_text(tensors.read_text().replace('"task": "statistics"', '"task": "tensor"', 1))
    summary, *_ = _run(tensors, tensors, tmp_path / "tensor_out", monkeypatch, "always")
    assert summary.mode == "tensor"


def _md5_written(path, rng: random.Random, changed: float, from_entry: int = 0) -> None:
    """Every tensor summary of the dump gets an md5 value (from its statistics; ``changed`` of them another),
    in the entries from ``from_entry`` on."""
    document = json.loads(path.read_text())
    for index, entry in enumerate(document["data"].values()):
        stack = [entry] if index >= from_entry else []
        while stack:
            value = stack.pop()
            if isinstance(value, dict) and "dtype" in value:
                text = json.dumps(value.get("Norm")) + ("x" if rng.random() < changed else "")
                value["md5"] = f"{zlib.crc32(text.encode()):08x}"
            elif isinstance(value, dict):
                stack.extend(value.values())
            elif isinstance(value, list):
                stack.extend(value)
    path.write_text(json.dumps(document))


@pytest.mark.parametrize("helper", [False, True])
def test_md5_pairs_stream_to_the_in_memory_files(varied_pair, tmp_path, monkeypatch, helper):
    npu, bench = varied_pair
    rng = random.Random(4)
    _md5_written(npu, rng, 0.0)
    _md5_written(bench, rng, 0.05)
    monkeypatch.setattr(block_reader, "BLOCK_BYTES", 4096)
    if helper:
        monkeypatch.setattr(large, "HELPER_FROM_BYTES", 0)
        monkeypatch.setattr(large, "_can_fork", lambda: True)  # other tests may leave threads in this process
        monkeypatch.setattr(large, "XLSX_ROW_LIMIT", 0)
    modes = []

    class Recording(large.TableBlocks):  # the block compare's tables (the in-memory one makes its own)
        def __init__(self, mode, *args):
            modes.append(mode)
            super().__init__(mode, *args)

    monkeypatch.setattr(large, "TableBlocks", Recording)
    memory = _run(npu, bench, tmp_path / "memory", monkeypatch, "never")
    streamed = _run(npu, bench, tmp_path / "streamed", monkeypatch, "always")
    assert modes == ["md5"]  # this process's (a helper's is in its own memory)
    _same_result(memory, streamed)
    assert streamed[0].mode == "md5" and streamed[0].suspicious > 20
    assert b",Different\n" in streamed[1] and b",pass\n" in streamed[1]
    if not helper:
        assert _fills(streamed[3][0]) == _fills(memory[3][0])


def test_md5_values_past_the_first_block_send_the_compare_to_memory(varied_pair, tmp_path, monkeypatch, caplog):
    npu, bench = varied_pair
    rng = random.Random(5)
    _md5_written(npu, rng, 0.0, from_entry=400)
    _md5_written(bench, rng, 0.05)
    monkeypatch.setattr(block_reader, "BLOCK_BYTES", 4096)
    memory = _run(npu, bench, tmp_path / "memory", monkeypatch, "never")
    with caplog.at_level(logging.DEBUG, logger="msprobe.core.compare.run"):
        streamed = _run(npu, bench, tmp_path / "streamed", monkeypatch, "always")
    _same_result(memory, streamed)
    assert streamed[0].mode == "md5"
    assert "md5 values past the NPU dump's first block" in caplog.text


@pytest.mark.parametrize("with_xlsx", [False, True])
@pytest.mark.parametrize("folder_existed", [False, True])
def test_a_broken_npu_dump_leaves_no_result_behind(varied_pair, tmp_path, monkeypatch, with_xlsx, folder_existed):
    npu, bench = varied_pair
    text = npu.read_text()
    npu.write_text(text[: len(text) * 3 // 4] + '"broken": {,}}}')
    monkeypatch.setattr(block_reader, "BLOCK_BYTES", 4096)
    monkeypatch.setattr(large, "HELPER_FROM_BYTES", 0)
    monkeypatch.setattr(large, "_can_fork", lambda: True)  # other tests may leave threads in this process
    if not with_xlsx:
        monkeypatch.setattr(large, "XLSX_ROW_LIMIT", 0)  # and so the helper compares half the NPU side
    monkeypatch.setenv(large.STREAM_ENV, "always")
    out = tmp_path / "out"
    if folder_existed:
        out.mkdir()
    with pytest.raises(DataFileError, match="invalid JSON at byte") as error:
        compare({"npu_json_path": str(npu), "bench_json_path": str(bench)}, out)
    assert str(npu) in str(error.value)
    assert (list(out.iterdir()) == []) if folder_existed else not out.exists()


# reading dump.json a block at a time


@pytest.mark.parametrize("block_bytes", [7, 300, 1 << 20])
def test_blocks_hold_what_json_load_reads(tmp_path, block_bytes):
    data = {
        'odd "name" {with} [brackets], and \\ slashes': {"input_args": [{"type": "str", "value": '}}]]"{'}]},
        "caf\u00e9.0.forward": {"output": [{"type": "float", "value": 1e-7}], "nested": {"a": [[[]]], "b": {}}},
        "big.0.forward": {"output": [{"type": "int", "value": 10**30}, {"type": "float", "value": -0.0}]},
    }
    path = tmp_path / "dump.json"
    path.write_text(
        '\n {"data" :\t{' + ",\n".join(f"{json.dumps(k)} : {json.dumps(v, indent=3)}" for k, v in data.items())
        + '} , "task": "statistics", "nan_here": NaN, "framework": "pytorch"}\n'
    )  # fmt: skip
    reader = block_reader.DumpStream(path, block_bytes=block_bytes)
    found = {}
    for block in reader.blocks():
        found.update(block)
    expected = json.loads(path.read_text())
    assert found == expected["data"] and list(found) == list(expected["data"])
    assert reader.header["task"] == "statistics" and math.isnan(reader.header["nan_here"])


def test_parts_split_the_blocks_between_two_readers(tmp_path):
    path = tmp_path / "dump.json"
    _write(path, _entries(random.Random(3), 300))
    size = path.stat().st_size
    first = [b for b in block_reader.DumpStream(path, block_bytes=1024).blocks((0, size // 2))]
    second = [b for b in block_reader.DumpStream(path, block_bytes=1024).blocks((size // 2, size + 1))]
    assert first and second
    merged = {k: v for block in first + second for k, v in block.items()}
    assert list(merged.items()) == list(json.loads(path.read_text())["data"].items())


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ('{"data": {"a": {"input_args": []}', "ends inside a value"),
        ('{"data": {"a": {}}} trailing', "extra data"),
        ('{"data": {"a": 5}}', "entry 'a' is not an object"),
        ('{"task": "x"}', "expected an object with a 'data' object"),
        ('["data"]', "expected an object with a 'data' object"),
        ('{"data": {"a": {"x": tru}}}', "invalid JSON at byte"),
        ('{"data": {"a" {}}}', "invalid JSON at byte 14"),
    ],
)
def test_bad_dump_files_get_one_message_naming_the_file(tmp_path, text, message):
    path = tmp_path / "dump.json"
    path.write_text(text)
    with pytest.raises(DataFileError, match=message) as error:
        for _ in block_reader.DumpStream(path, block_bytes=8).blocks():
            pass
    assert str(path) in str(error.value)


def test_a_dump_that_is_not_utf8_is_named(tmp_path):
    path = tmp_path / "dump.json"
    path.write_bytes(b'{"data": {"\xff\xfe": {}}}')
    with pytest.raises(DataFileError, match="not UTF-8"):
        list(block_reader.DumpStream(path).blocks())


# the pieces, against outside oracles


def test_float_texts_are_reprs():
    rng = np.random.default_rng(7)
    values = rng.integers(0, 2**64, 300_000, dtype=np.uint64).view(np.float64).tolist()
    values += (rng.standard_normal(100_000) * 10.0 ** rng.integers(-20, 25, 100_000)).tolist()
    values += [1e-4, 9.999999999999999e-05, 1e-5, 1e-6, 1e16, 9999999999999998.0, 5e-324, -0.0, math.inf, math.nan]
    assert float_texts(values) == [repr(value) for value in values]
    assert float_texts(values, "%") == [f"{value!r}%" for value in values]


@pytest.mark.parametrize("in_c", [True, False])
def test_csv_writer_writes_what_pandas_writes(monkeypatch, in_c):
    if not in_c:
        monkeypatch.setattr(spreadsheet, "c_text", None)
    else:
        assert spreadsheet.c_text is not None, "msprobe-core was built without its C helpers"
    rng = random.Random(11)
    kinds = [lambda: rng.uniform(-1e20, 1e20), lambda: rng.random() * 1e-7, lambda: math.nan, lambda: -math.inf,
             lambda: rng.randrange(-10**6, 10**6), lambda: True, lambda: None, lambda: "N/A",
             lambda: "=cmd|' /C calc'!A0",
             lambda: 'a,b\n"c"', lambda: "x\ry", lambda: "-0.5", lambda: "", lambda: "a\x00b", lambda: "+x\x00,y",
             lambda: "caf\u00e9 \u4e2d", lambda: np.float64(0.1), lambda: np.float64("nan")]  # fmt: skip
    columns = {f"mixed{i}": [rng.choice(kinds)() for _ in range(2000)] for i in range(8)}
    columns["floats"] = [rng.uniform(-1, 1) * 10.0 ** rng.randint(-12, 20) for _ in range(2000)]
    columns["odd floats"] = [
        rng.choice([math.nan, math.inf, -0.0, 5e-324, 1e-7, 2.5e-5, 1e16, 0.1]) for _ in range(2000)
    ]
    columns["texts"] = [rng.choice(["plain", "+1 more", "@sum", "[8, 64]", 'say "hi"']) for _ in range(2000)]
    for dtype in (None, object):
        table = pd.DataFrame(columns, dtype=dtype)
        # pandas leaves a carriage return bare (a row break to its readers); msprobe quotes the cell
        assert _csv_text(table) == safe_table(table).to_csv(index=False).replace("x\ry", '"x\ry"')
    single = pd.DataFrame({"only": ["", "x", None, 1.5]}, dtype=object)
    assert _csv_text(single) == safe_table(single).to_csv(index=False)


def _csv_text(table: pd.DataFrame) -> str:
    written = io.BytesIO()
    write_csv_table(written, table)
    return written.getvalue().decode("utf-8")


def test_statistic_columns_by_hand():
    npu = [3.0, 1.0, 2.0, 5, "x", math.inf, math.nan, 1e308, 0.5]
    bench = [2.0, 0.0, 2.0, 2, 1.0, math.inf, 1.0, -1e308, 0.25]
    diffs, relatives, warn = statistic_columns(npu, bench)
    # 3-2=1, 1/2*100=50%; warn when |diff| / (max(|a|,|b|) + 1e-10) > 0.5
    assert diffs == [1.0, 1.0, 0.0, 3, "N/A", "Nan", "Nan", math.inf, 0.25]
    assert relatives == ["50.0%", "N/A", "0.0%", "150.0%", "N/A", "Nan", "Nan", "inf%", "100.0%"]
    assert warn.tolist() == [False, True, False, True, False, False, False, True, False]


def test_the_size_decides_unless_the_environment_does(varied_pair, tmp_path, monkeypatch):
    npu, bench = varied_pair
    streamed = []
    original = large.compare_blockwise
    monkeypatch.setattr(large, "compare_blockwise", lambda *a, **k: streamed.append(1) or original(*a, **k))
    total = npu.stat().st_size + bench.stat().st_size
    for mode, threshold, expected in [("", total + 1, 0), ("", total, 1), ("never", 0, 0), ("always", total + 1, 1)]:
        monkeypatch.setattr(large, "STREAM_FROM_BYTES", threshold)
        streamed.clear()
        _run(npu, bench, tmp_path / f"out{mode}{threshold}", monkeypatch, mode)
        assert len(streamed) == expected, (mode, threshold)
    monkeypatch.setattr(block_reader, "_jsonscan", None)  # installed without a C compiler: read whole
    streamed.clear()
    summary, *_ = _run(npu, bench, tmp_path / "without_c", monkeypatch, "always")
    assert streamed == [] and summary.rows > 0


def test_a_progress_bar_counts_both_processes_bytes(varied_pair, tmp_path, monkeypatch):
    import tqdm

    bars = []

    class Bar:
        def __init__(self, total, **options):
            self.total, self.n, self.shown, self.notes = total, 0, [], []
            bars.append(self)

        def update(self, count):
            self.n += count
            self.shown.append(self.n)

        def set_postfix_str(self, text, refresh=True):
            self.notes.append(text)

        def close(self):
            pass

    monkeypatch.setattr(tqdm, "tqdm", Bar)
    monkeypatch.setattr(block_reader, "BLOCK_BYTES", 4096)
    monkeypatch.setattr(large, "HELPER_FROM_BYTES", 0)
    monkeypatch.setattr(large, "XLSX_ROW_LIMIT", 0)
    monkeypatch.setattr(large, "_can_fork", lambda: True)
    npu, bench = varied_pair
    _run(npu, bench, tmp_path / "out", monkeypatch, "always")
    bar, status = bars  # the table's bar, then the status line of the search that follows it
    assert bar.total == npu.stat().st_size + bench.stat().st_size
    assert len(bar.shown) > 20 and bar.shown == sorted(bar.shown)
    # the entries are nearly all of each file; half of them were read by the helper
    assert 0.95 * bar.total < bar.n <= bar.total
    # the search for a first divergence after the table says what it is doing
    assert status.total is None and "finding where the runs part ways" in status.notes


def test_a_plain_process_uses_the_helper(varied_pair, tmp_path):
    """In a fresh interpreter (one thread, besides the progress bar's monitor) the helper is used unforced."""
    npu, bench = varied_pair
    script = f"""
import os
os.environ["{large.STREAM_ENV}"] = "always"
from msprobe.core.compare import large
from msprobe.core.compare.run import compare
large.HELPER_FROM_BYTES, large.XLSX_ROW_LIMIT = 0, 0
used = []
original = large._Forked.__init__
large._Forked.__init__ = lambda self, target, *a, **k: used.append(target.__name__) or original(self, target, *a, **k)
compare({{"npu_json_path": {str(npu)!r}, "bench_json_path": {str(bench)!r}}}, {str(tmp_path / "out")!r})
print(",".join(used))
"""
    if (os.cpu_count() or 1) < 2:
        pytest.skip("the helper needs two cores")
    run = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=300)
    assert run.returncode == 0, run.stderr[-2000:]
    assert run.stdout.split() == ["_later_bench_rows,_later_half"]


def test_entries_with_no_values_keep_the_compare_streamed(tmp_path, monkeypatch, caplog):
    """Empty entries ({}) give no rows; a bench of many of them once read as "a name appears twice" and
    went to the in-memory compare silently, losing its memory bound."""
    rng = random.Random(5)
    npu = _entries(rng, 50)
    bench = {**npu, **{f"Torch.empty.{index}.forward": {} for index in range(2000)}}
    _write(tmp_path / "npu" / "dump.json", npu)
    _write(tmp_path / "bench" / "dump.json", bench)
    paths = tmp_path / "npu" / "dump.json", tmp_path / "bench" / "dump.json"
    memory = _run(*paths, tmp_path / "memory", monkeypatch, "never")
    streamed_at = []
    real = large.compare_blockwise

    def streamed_compare(*arguments):
        done = real(*arguments)  # NeedsWholeDumps when it falls back
        streamed_at.append(done)
        return done

    monkeypatch.setattr(large, "compare_blockwise", streamed_compare)
    with caplog.at_level(logging.WARNING):
        streamed = _run(*paths, tmp_path / "streamed", monkeypatch, "always")
    assert streamed_at and "in memory" not in caplog.text
    _same_result(memory, streamed)


def test_a_fallback_to_memory_says_why(tmp_path, monkeypatch, caplog):
    text = (REFERENCE_DUMPS / "pytorch" / "statistics_L1" / "step0" / "rank" / "dump.json").read_text()
    document = json.loads(text)
    name, entry = next(iter(document["data"].items()))
    body = json.dumps(document["data"])[1:-1]
    twice = tmp_path / "twice.json"  # one name twice: a dict keeps the last, as the in-memory reader does
    twice.write_text(
        '{"task": "statistics", "level": "L1", "data": {' + body + f", {json.dumps(name)}: {json.dumps(entry)}" + "}}"
    )
    with caplog.at_level(logging.WARNING):
        _run(twice, twice, tmp_path / "out", monkeypatch, "always")
    assert "an entry name appears twice; comparing in memory" in caplog.text


def test_an_in_memory_compare_too_large_for_the_machine_is_refused(tmp_path, monkeypatch):
    from msprobe.core.errors import UsageError

    dump = REFERENCE_DUMPS / "pytorch" / "statistics_L1" / "step0" / "rank" / "dump.json"
    monkeypatch.setenv("MSPROBE_COMPARE_MEMORY_MAX_GB", "0.000001")  # about a kilobyte
    with pytest.raises(
        UsageError, match=r"fuzzy_match and name mappings are compared in memory.*MSPROBE_COMPARE_MEMORY_MAX_GB"
    ):
        compare({"npu_json_path": str(dump), "bench_json_path": str(dump)}, tmp_path / "out", fuzzy_match=True)
    assert not (tmp_path / "out").exists() or not any((tmp_path / "out").iterdir())


def test_the_diagnosis_size_limit_counts_dump_files_of_any_name(tmp_path):
    """A compare may name its files npu.json and bench.json; the diagnosis, which reads them whole, once
    saw no dump.json beside them, counted 0 bytes, and read 90 MB of them into 2.4 GB."""
    from msprobe.core.diagnosis import diagnosis_fits

    npu, bench = tmp_path / "npu.json", tmp_path / "bench.json"
    npu.write_bytes(b" " * 100)
    bench.write_bytes(b" " * 100)
    assert diagnosis_fits(npu, bench, limit=150)[0] is False
    assert diagnosis_fits(npu, bench, limit=200)[0] is True
