import json
import math

import numpy as np
import pytest

from msprobe.core.dump.numbers import float32_mean, json_number
from msprobe.core.dump.writer import encode_json


def test_nonfinite_numbers_are_written_as_pythons_json_tokens():
    # what the reference writes (Python's json.dump) and what its readers accept; text such as "-inf" they refuse
    values = [float("inf"), float("-inf"), float("nan"), 1.5]
    expected = json.dumps({"Max": values})
    assert encode_json({"Max": [json_number(v) for v in values]}) == expected.replace(" ", "")
    assert json.dumps([json_number(v) for v in values]) == json.dumps(values)
    assert math.isnan(json.loads(encode_json(json_number(float("nan")))))
    assert json_number(1.5) == 1.5 and json_number(3) == 3 and json_number(None) is None


@pytest.mark.parametrize("length", [1, 2, 7, 128, 129, 1000, 65536, 262147])
def test_float32_mean_is_numpys_float32_mean_to_the_last_bit(length):
    generator = np.random.default_rng(length)
    for scale in (1e-3, 1.0, 3e4):
        values = (generator.standard_normal(length) * scale + 0.3).astype(np.float32)
        assert float32_mean(float(values.sum()), values.size) == float(values.mean()), scale


def test_float32_mean_rounds_a_count_float32_cannot_hold():
    count = (1 << 24) + 3  # float32 holds 2**24 + 4
    assert float32_mean(1e7, count) == float(np.float32(1e7) / np.float32(count))
