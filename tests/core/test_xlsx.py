"""compare_result_*.xlsx from msprobe's own row writer, checked cell for cell and fill for fill through openpyxl
against the file XlsxWriter writes by itself (the writer msprobe used before)."""

import math
import zipfile

import numpy as np
import openpyxl
import pandas as pd
import pytest
import xlsxwriter
from hypothesis import given, settings
from hypothesis import strategies as st

from msprobe.core import spreadsheet
from msprobe.core.compare import xlsx
from msprobe.core.compare.xlsx import FILLS, XlsxStream, python_sheet_rows
from msprobe.core.spreadsheet import table_columns

TEXTS = [
    "Torch.matmul.0.forward.input.0", "=1+1", "-0.5", "a & b < c > d", 'say "hi"', "line\nbreak", "tab\tin",
    " leading", "trailing ", "\u00a0nbsp", "ctrl\x01\x1f\x0b", "_x0041_ literal", "_x00ZZ_ not an escape",
    "emoji \U0001f600", "\ufffe\uffff", "", "N/A", "<r>rich?</r>", "x" * 20000, "https://example.com/a:b",
]  # fmt: skip
NUMBERS = [
    1.4859726428985596, -1.5021066665649414, 0.1 + 0.2, 1e-300, 5e-324, -2.5e+20, 0.0, -0.0, 2.0, 123456789.125,
    float("inf"), float("-inf"), float("nan"), 1 / 3, 1e16, 9.999999999999999e22,
]  # fmt: skip


def table(rows: int = 60) -> pd.DataFrame:
    rng = np.random.default_rng(7)
    texts = [TEXTS[i % len(TEXTS)] for i in range(rows)]
    numbers = [NUMBERS[i % len(NUMBERS)] for i in range(rows)]
    randoms = rng.standard_normal(rows) * 10.0 ** rng.integers(-30, 30, rows)
    mixed = [["N/A", None, 3, True, np.float32(0.5), 2.5, float("nan"), ""][i % 8] for i in range(rows)]
    return pd.DataFrame({
        "NPU Name": texts, "Max": numbers, "Random": randoms, "Mixed": mixed, "Count": list(range(rows)),
        "Flag": [i % 3 == 0 for i in range(rows)], "Stack": [None] * rows,
    })  # fmt: skip


def xlsxwriter_file(frame: pd.DataFrame, highlight: dict, path) -> None:
    """What msprobe wrote before: XlsxWriter's own rows, inf and nan as text."""
    workbook = xlsxwriter.Workbook(str(path), {"constant_memory": True, "strings_to_formulas": False})
    sheet = workbook.add_worksheet("Sheet")
    sheet.write_row(0, 0, list(frame.columns), workbook.add_format({"bold": True}))
    fills = {color: workbook.add_format({"bg_color": "#" + argb[2:]}) for color, argb in FILLS.items()}
    for index, row in enumerate(frame.itertuples(index=False, name=None)):
        cells = [f"{v}\t" if isinstance(v, float) and not math.isfinite(v) else v for v in row]
        cells = [float(v) if isinstance(v, np.floating) else v for v in cells]
        sheet.write_row(index + 1, 0, cells, fills.get(highlight.get(index, ""), None))
    workbook.close()


def ours(frame: pd.DataFrame, highlight: dict, path, blocks: int = 3) -> None:
    stream = XlsxStream(path, list(frame.columns))
    size = math.ceil(len(frame) / blocks)
    for start in range(0, len(frame), size):
        block = frame.iloc[start : start + size].reset_index(drop=True)
        stream.add_table(block, {i - start: c for i, c in highlight.items() if start <= i < start + size})
    assert stream.close() == path


def cells(path):
    sheet = openpyxl.load_workbook(path).active
    return sheet, [[(c.value, c.fill.fgColor.rgb if c.fill.fill_type else None, c.font.b) for c in row]
                   for row in sheet.iter_rows()]  # fmt: skip


def same_value(mine, theirs, exact) -> bool:
    if isinstance(mine, (int, float)) and not isinstance(mine, bool) and isinstance(theirs, (int, float)):
        # XlsxWriter writes 16 significant digits, which can miss a float's last bit; ours is repr's text
        return mine == exact and math.isclose(mine, theirs, rel_tol=1e-15, abs_tol=0.0)
    return mine == theirs


@pytest.mark.parametrize("in_c", [True, False], ids=["C", "Python"])
def test_every_cell_and_fill_equals_what_xlsxwriter_writes(tmp_path, monkeypatch, in_c):
    if in_c and spreadsheet.c_text is None:
        pytest.skip("msprobe-core was built without its C helpers")
    if not in_c:
        monkeypatch.setattr(spreadsheet, "c_text", None)
    frame = table()
    highlight = {i: ("red" if i % 5 == 0 else "yellow") for i in range(0, len(frame), 2)}
    ours(frame, highlight, tmp_path / "ours.xlsx")
    xlsxwriter_file(frame, highlight, tmp_path / "theirs.xlsx")
    mine_sheet, mine = cells(tmp_path / "ours.xlsx")
    theirs_sheet, theirs = cells(tmp_path / "theirs.xlsx")
    assert mine_sheet.dimensions == theirs_sheet.dimensions == f"A1:G{len(frame) + 1}"
    assert len(mine) == len(theirs)
    compared = 0
    for r, (row_a, row_b) in enumerate(zip(mine, theirs)):
        assert [c[1:] for c in row_a] == [c[1:] for c in row_b], f"row {r + 1}: fill or font"
        for c, (a, b) in enumerate(zip(row_a, row_b)):
            exact = frame.iat[r - 1, c] if r else None
            if isinstance(exact, (float, np.floating)) and not math.isfinite(exact):
                exact = None
            if exact == "<r>rich?</r>":  # XlsxWriter puts such text into the XML unescaped, and it reads back empty
                assert (a[0], b[0]) == (exact, "")
            else:
                assert a[0] == b[0] or same_value(a[0], b[0], exact), f"row {r + 1} col {c + 1}: {a[0]!r} {b[0]!r}"
            compared += 1
    assert compared == (len(frame) + 1) * 7
    assert mine[1][1][0] == "nan\t" or any(row[1][0] == "inf\t" for row in mine)  # non-finite as the text


def test_the_c_and_python_rows_are_the_same_text():
    if spreadsheet.c_text is None:
        pytest.skip("msprobe-core was built without its C helpers")
    frame = table(200)
    frame["Tiny"] = [10.0 ** -(i % 320) for i in range(len(frame))]  # orjson and repr write some differently
    columns = table_columns(frame)
    styles = [(i % 3) for i in range(len(frame))]
    expected = python_sheet_rows(columns.values, 2, styles)
    assert xlsx.sheet_rows(columns.values, 2, styles) == expected  # the C helper making each float's text
    assert any(p is not None for p in columns.packed)
    assert xlsx.sheet_rows(columns.values, 2, styles, columns.packed) == expected  # and taking it packed


def test_an_over_long_text_is_cut_as_excel_needs_and_the_row_keeps_its_other_cells(tmp_path):
    frame = pd.DataFrame({"a": ["\U0001f600" * 20000, "y" * 40000], "b": [1.5, 2.5]})
    ours(frame, {}, tmp_path / "long.xlsx", blocks=1)
    sheet = openpyxl.load_workbook(tmp_path / "long.xlsx").active
    assert sheet["A2"].value == "\U0001f600" * 16383 and sheet["A3"].value == "y" * 32767  # 32767 UTF-16 units
    assert sheet["B2"].value == 1.5 and sheet["B3"].value == 2.5


def test_past_the_row_limit_the_file_is_given_up(tmp_path, monkeypatch):
    monkeypatch.setattr(xlsx, "XLSX_ROW_LIMIT", 10)
    stream = XlsxStream(tmp_path / "big.xlsx", ["a"])
    stream.add_table(pd.DataFrame({"a": list(range(8))}), {})
    stream.add_table(pd.DataFrame({"a": list(range(8))}), {})
    assert stream.full and stream.close() is None
    assert list(tmp_path.iterdir()) == []


def test_the_package_is_compressed_and_complete(tmp_path):
    frame = table(500)
    ours(frame, {}, tmp_path / "ours.xlsx")
    with zipfile.ZipFile(tmp_path / "ours.xlsx") as package:
        assert package.testzip() is None
        names = package.namelist()
        sheet = package.getinfo(xlsx.SHEET)
    assert names[0] == "[Content_Types].xml" and "xl/styles.xml" in names
    assert sheet.compress_type == zipfile.ZIP_DEFLATED and sheet.compress_size < sheet.file_size / 3


cell_values = st.one_of(
    st.none(), st.booleans(), st.integers(-(2**62), 2**62), st.floats(allow_nan=True, allow_infinity=True),
    st.text(alphabet=st.characters(codec=None, categories=None), max_size=40), st.sampled_from(["", " ", "_x00aF_"]),
)  # fmt: skip


@settings(max_examples=300, deadline=None)
@given(st.lists(st.lists(cell_values, min_size=3, max_size=3), min_size=1, max_size=12), st.integers(1, 5000))
def test_c_and_python_agree_on_any_cells(rows, first_row):
    if spreadsheet.c_text is None:
        pytest.skip("msprobe-core was built without its C helpers")
    columns = [list(column) for column in zip(*rows)]
    styles = [index % 3 for index in range(len(rows))]
    expected = python_sheet_rows(columns, first_row, styles)
    assert xlsx.sheet_rows(columns, first_row, styles) == expected
    expected.decode("utf-8")  # well-formed text, whatever the cells held
    # renumbered as a helper process's rows are: the same as made with the later numbers
    assert xlsx.shift_rows(expected, 1000) == python_sheet_rows(columns, first_row + 1000, styles)
