"""Reading responses files: a line's object as json.loads reads it, with its per-token columns in arrays, and a
long response held in a small multiple of its text."""

from __future__ import annotations

import json
import math
import random
import tracemalloc
from array import array

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from msprobe.core.errors import DataFileError
from msprobe.core.generation.responses import _parse_line, read_responses

_scalars = st.one_of(
    st.none(), st.booleans(), st.integers(-(2**70), 2**70), st.floats(allow_nan=False), st.text(max_size=5)
)
_values = st.recursive(
    _scalars,
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=4), inner, max_size=4),
    max_leaves=12,
)
_columns = st.one_of(
    st.lists(st.integers(-(2**65), 2**65), max_size=8),
    st.lists(st.one_of(st.none(), st.floats(allow_nan=False), st.integers(-(2**40), 2**40)), max_size=8),
    _values,
)
_objects = st.dictionaries(
    st.sampled_from(["tokens", "logprobs", "entropies", "id", "top_logprobs", "x", "é"]), _columns, max_size=6
)


def _plain(value):
    """An array as the list it stands for (NaN for null), to set beside json.loads's reading."""
    if isinstance(value, array):
        return [None if isinstance(item, float) and math.isnan(item) else item for item in value]
    return value


@settings(max_examples=300, deadline=None)
@given(_objects, st.sampled_from([None, 0, 2]))
def test_a_line_reads_as_json_loads_reads_it(obj, indent):
    line = json.dumps(obj, indent=indent)
    parsed = _parse_line(line, None, 1)  # type: ignore[arg-type]
    expected = json.loads(line)
    for key in ("logprobs", "entropies"):  # a float column holds its integers as floats, as the old reader did
        if isinstance(parsed.get(key), array):
            expected[key] = [None if item is None else float(item) for item in expected[key]]
    assert {key: _plain(value) for key, value in parsed.items()} == expected
    for key in ("tokens", "logprobs", "entropies"):
        value = obj.get(key)
        numbers = isinstance(value, list) and all(
            type(v) is int and -(2**63) <= v < 2**63 if key == "tokens" else (v is None or type(v) in (int, float))
            for v in value
        )
        assert isinstance(parsed.get(key), array) == (numbers and key in obj), (key, value)


@pytest.mark.parametrize(
    "line, message",
    [
        ('{"tokens": [1, 2', "Expecting"),
        ('{"tokens": [1 2]}', "Expecting ',' delimiter"),
        ('{"tokens": [1]} x', "Extra data"),
        ('{"tokens" [1]}', "Expecting ':' delimiter"),
        ("{'tokens': [1]}", "property name"),
    ],
)
def test_broken_lines_are_refused_as_json_refuses_them(line, message):
    with pytest.raises(json.JSONDecodeError, match=message):
        json.loads(line)
    with pytest.raises(json.JSONDecodeError, match=message):
        _parse_line(line, None, 1)  # type: ignore[arg-type]


def test_a_line_that_is_not_an_object_is_named(tmp_path):
    path = tmp_path / "r.jsonl"
    path.write_text("[1, 2]\n")
    with pytest.raises(DataFileError, match="line 1 is not a JSON object"):
        read_responses(path)


def test_a_long_response_is_held_in_a_small_multiple_of_its_text(tmp_path):
    """200,000 tokens (3.5 MB of text): reading a line holds its bytes, then its text, and the arrays hold 8
    bytes a value, 3x the text at the peak; json.loads and a validated copy held some 10x (a Python object and
    a pointer for each value, twice over)."""
    rng = random.Random(0)
    count = 200_000
    record = {
        "id": "long",
        "tokens": [rng.randrange(50_000) for _ in range(count)],
        "logprobs": [round(-rng.random() * 4, 6) for _ in range(count)],
    }
    path = tmp_path / "long.jsonl"
    path.write_text(json.dumps(record) + "\n")
    size = path.stat().st_size
    del record
    tracemalloc.start()
    try:
        (response,) = read_responses(path)
        _current, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert len(response.tokens) == count and response.logprobs[0] <= 0
    assert peak < 3.5 * size, (peak, size)
