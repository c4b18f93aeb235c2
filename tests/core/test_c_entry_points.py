"""Each C extension of msprobe-core, called straight at its entry points with what hypothesis makes up.

Run as part of the core tests, and in the `sanitizers` nox session with the extensions built under
AddressSanitizer and UndefinedBehaviorSanitizer, where any read or write out of bounds, overflow or
undefined operation ends the run. Expected values come from Python's json and csv modules and numpy.
"""

from __future__ import annotations

import io
import json

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from msprobe.core import spreadsheet
from msprobe.core.compare import rows
from msprobe.core.dump import _jsonscan, float_stats

pytestmark = pytest.mark.skipif(_jsonscan is None or rows.c_rows is None, reason="built without a C compiler")
FUZZ = settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])

json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner, max_size=4),
    max_leaves=20,
)


@FUZZ
@given(value=json_values, tail=st.binary(max_size=16))
def test_value_end_is_where_json_says_the_value_ends(value, tail):
    text = json.dumps(value).encode()
    assert _jsonscan.value_end(text + b" " + tail, 0) == len(text)
    assert _jsonscan.value_end(text[:-1], 0) in (-1, len(text) - 1)  # cut short: incomplete (a number may end)


@FUZZ
@given(data=st.binary(max_size=200), at=st.integers(-5, 205))
def test_scanning_any_bytes_from_any_position_is_safe(data, at):
    for scan in (_jsonscan.value_end, _jsonscan.member_ends):
        try:
            scan(data, at)
        except (ValueError, IndexError, TypeError):
            pass  # refused in words; what must never happen is a read outside the buffer


@FUZZ
@given(members=st.dictionaries(st.text(max_size=6), json_values, max_size=5))
def test_member_ends_are_the_commas_between_members(members):
    text = json.dumps(members)[1:-1].encode()  # the inside of an object, as the reader hands it over
    commas, _ = _jsonscan.member_ends(text, 0)
    pieces, start = [], 0
    for comma in commas:
        pieces.append(text[start:comma])
        start = comma + 1
    pieces.append(text[start:])
    rebuilt = [json.loads(b"{" + piece + b"}") for piece in pieces if piece.strip()]
    assert rebuilt == [{key: value} for key, value in members.items()]


@FUZZ
@given(data=st.binary(max_size=300), cuts=st.lists(st.integers(-3, 303), max_size=6))
def test_the_row_reader_takes_any_bytes_and_any_commas(data, cuts):
    handed, found, names = [], [], []
    try:
        rows.c_rows.parse_rows(data, 0, len(data), sorted(cuts), found, names, lambda a, b: handed.append((a, b)))
    except (ValueError, TypeError, OverflowError):
        pass
    assert len(names) <= len(cuts) + 1


@FUZZ
@given(cells=st.lists(st.lists(st.text(max_size=12), min_size=2, max_size=2), min_size=1, max_size=8))
def test_csv_lines_are_the_text_pandas_writes_of_the_safe_table(cells):
    """pandas' to_csv of the safe table, except that a cell holding a carriage return is quoted: csv.writer
    quotes it when rows end in "\r\n", and leaves it bare (a row break to every reader) when they end in "\n"."""
    import csv

    table = spreadsheet.pd.DataFrame(cells, columns=["a", "b"])
    handle = io.BytesIO()
    spreadsheet.write_csv_table(handle, table)
    safe = spreadsheet.safe_table(table)
    expected = safe.to_csv(index=False)
    if any("\r" in cell for row in cells for cell in row):
        rows = []
        for row in [list(safe.columns), *safe.values.tolist()]:
            text = io.StringIO()
            csv.writer(text, lineterminator="\r\n").writerow(row)
            rows.append(text.getvalue()[:-2] + "\n")
        expected = "".join(rows)
    assert handle.getvalue().decode("utf-8") == expected


@FUZZ
@given(values=st.lists(st.floats(width=32, allow_nan=False, allow_infinity=False), min_size=1, max_size=64))
def test_float_statistics_at_an_address_are_numpy_s(values):
    if not float_stats.AVAILABLE:
        pytest.skip("the kernels are not built here")
    array = np.array(values, dtype=np.float32)
    found = float_stats.stats_at(array.ctypes.data, array.size, float_stats.FLOAT32)
    with np.errstate(over="ignore"):
        overflows = not (np.isfinite(array.sum()) and np.isfinite(np.linalg.norm(array)))
    if found is None:  # a sum or norm past float32's range: left to the framework, as torch computes it
        assert overflows
        return
    wide = array.astype(np.float64)
    assert found[0] == wide.max() and found[1] == wide.min()
    assert found[3] == pytest.approx(np.sqrt(np.sum(wide * wide)), rel=1e-6, abs=1e-30)
