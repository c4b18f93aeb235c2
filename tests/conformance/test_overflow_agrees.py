"""The float16 overflow check on the zoo against the reference's, judged by the reference's own values.

On CPU the reference keeps every call in whose data it sees an inf or nan (its overflow test proper needs
the NPU's flag); the rule both tools document is narrower: finite inputs, inf or nan outputs. So the
oracle is the reference's dump filtered by that rule, using the statistics the reference itself recorded,
and ours must keep exactly those calls, with the same values.
"""

from __future__ import annotations

import math

from agreement import read_step, tensor_differences


def _nonfinite(value) -> bool:
    if isinstance(value, dict):
        if "dtype" in value:
            return any(isinstance(value.get(k), float) and not math.isfinite(value[k]) for k in ("Max", "Min"))
        return any(_nonfinite(item) for item in value.values())
    if isinstance(value, list):
        return any(_nonfinite(item) for item in value)
    return False


def _overflowed(data: dict) -> list[str]:
    return [
        name
        for name, entry in data.items()
        if name.endswith(".forward")
        and not _nonfinite([entry.get("input_args"), entry.get("input_kwargs")])
        and _nonfinite(entry.get("output"))
    ]


def test_the_float16_overflow_check_keeps_the_calls_the_references_values_say_overflowed(dumps):
    ours, reference = dumps("cnn", "overflow_check", "L1", "--float16")
    overflows = 0
    for step in (0, 1):
        theirs = read_step(reference, step)["dump"]["data"]
        mine = read_step(ours, step)["dump"]["data"]
        expected = _overflowed(theirs)
        overflows += len(expected)
        assert [name for name in mine if name.endswith(".forward")] == expected, step
        for name in expected:
            for index, (a, b) in enumerate(zip(mine[name]["output"], theirs[name]["output"])):
                assert not tensor_differences(
                    {k: v for k, v in a.items() if k != "data_name"},
                    {k: v for k, v in b.items() if k != "data_name"},
                    f"{name}.output.{index}",
                )
    assert overflows, "the run must overflow somewhere, or it checks nothing"
