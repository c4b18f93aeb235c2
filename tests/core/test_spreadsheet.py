"""Result files open as data: a dump's text never becomes a live spreadsheet formula."""

import csv
import io
import json

import openpyxl
import pandas as pd
from click.testing import CliRunner
from repo_paths import REFERENCE_DUMPS

from msprobe.cli.main import cli
from msprobe.core import spreadsheet

HOSTILE = ['=HYPERLINK("http://x","y")', "=cmd|' /C calc'!A0", "+1+1", "@SUM(A1)", "-2+3", "\tx", "\rx"]


def test_text_that_starts_a_formula_is_escaped_and_numbers_are_not():
    for text in HOSTILE:
        assert spreadsheet.safe_cell(text) == "'" + text
    for value in ("-0.5", "-inf\t", "12.5%", "Functional.relu.0.forward", 3, -1.5, None, True):
        assert spreadsheet.safe_cell(value) == value
    handle = io.StringIO()
    spreadsheet.writer(handle).writerow([HOSTILE[0], -2, "ok"])
    assert next(csv.reader(io.StringIO(handle.getvalue()))) == ["'" + HOSTILE[0], "-2", "ok"]


def test_a_hostile_api_name_stays_text_in_the_compare_results(tmp_path):
    source = REFERENCE_DUMPS / "pytorch" / "statistics_L1" / "step0" / "rank" / "dump.json"
    data = json.loads(source.read_text())
    name = '=HYPERLINK("http://evil","x").0.forward'
    data["data"] = {name: data["data"]["Functional.relu.0.forward"], **data["data"]}
    dump = tmp_path / "dump.json"
    dump.write_text(json.dumps(data))
    config = tmp_path / "compare.json"
    config.write_text(json.dumps({"npu_path": str(dump), "bench_path": str(dump)}))
    result = CliRunner().invoke(cli, ["compare", "-i", str(config), "-o", str(tmp_path / "out")])
    assert result.exit_code == 0, result.output
    table = pd.read_csv(next((tmp_path / "out").glob("compare_result_*.csv")), keep_default_na=False)
    assert table["NPU Name"].iloc[0] == "'" + name + ".input.0"
    sheet = openpyxl.load_workbook(next((tmp_path / "out").glob("compare_result_*.xlsx"))).active
    cell = sheet.cell(row=2, column=1)
    assert cell.data_type == "s" and cell.value == name + ".input.0"  # a text cell, not a formula


def test_a_carriage_return_inside_a_cell_is_quoted_so_no_row_starts_with_its_formula(tmp_path):
    """`x\r=cmd|...` written bare: csv.reader and pandas end the row at the return, and the next row starts
    with the formula, unescaped. Every CSV writer quotes such a cell (as csv does with "\r\n" line ends)."""
    import math

    hostile = "x\r=cmd|' /C calc'!A0"
    table = pd.DataFrame({"NPU Name": [hostile, "ok"], "Max diff": [1.5, math.nan]})
    for c_text in (spreadsheet.c_text, None):  # the C text maker and the Python one
        saved, spreadsheet.c_text = spreadsheet.c_text, c_text
        try:
            handle = io.BytesIO()
            spreadsheet.write_csv_table(handle, table)
        finally:
            spreadsheet.c_text = saved
        rows = list(csv.reader(io.StringIO(handle.getvalue().decode())))
        assert rows == [["NPU Name", "Max diff"], [hostile, "1.5"], ["ok", ""]]
        assert pd.read_csv(io.BytesIO(handle.getvalue()), keep_default_na=False)["NPU Name"].tolist() == [hostile, "ok"]
    for single in ([hostile], ["=" + hostile]):  # a table of one column
        handle = io.BytesIO()
        spreadsheet.write_csv_table(handle, pd.DataFrame({"id": single}))
        assert [row for row in csv.reader(io.StringIO(handle.getvalue().decode()))][1] == [
            spreadsheet.safe_cell(single[0])
        ]
    text = io.StringIO()
    spreadsheet.writer(text, lineterminator="\n").writerow([hostile, -2, None, 0.5])
    assert list(csv.reader(io.StringIO(text.getvalue()))) == [[hostile, "-2", "", "0.5"]]
