"""The per-call path in C (``_fast_path.c``) at its entry point, with argument structures hypothesis makes up.

Each example is one call of the recorder's API handler, once through the fast path and once through the Python
recorder: the two entries must be equal, and the call must get its own arguments back and return its own
result. Run with the torch tests, and in the `sanitizers` nox session with the fast path built under
AddressSanitizer and UndefinedBehaviorSanitizer, where any read or write out of bounds ends the run.
"""

from __future__ import annotations

import json

import pytest
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from test_fast_path import record_call

from msprobe.core.dump.pending_values import PLACEHOLDERS
from msprobe.pytorch.dump import device_batch, fast_path

pytestmark = pytest.mark.skipif(not fast_path.AVAILABLE, reason="built without a C compiler")
FUZZ = settings(max_examples=120, deadline=None, suppress_health_check=[HealthCheck.too_slow])

DTYPES = [torch.float32, torch.float64, torch.float16, torch.bfloat16, torch.int64, torch.int8, torch.bool]


@st.composite
def tensors(draw) -> torch.Tensor:
    shape = draw(st.lists(st.integers(0, 4), max_size=3))
    dtype = draw(st.sampled_from(DTYPES))
    values = torch.randn(tuple(shape), generator=torch.Generator().manual_seed(draw(st.integers(0, 99)))) * 100
    tensor = values.to(dtype)
    if tensor.is_floating_point() and tensor.numel() and draw(st.booleans()):
        tensor.view(-1)[0] = draw(st.sampled_from([float("inf"), float("-inf"), float("nan")]))
    if draw(st.booleans()) and tensor.dim() >= 2:
        tensor = tensor.transpose(0, -1)  # not contiguous
    return tensor


leaves = (
    tensors()
    | st.none()
    | st.booleans()
    | st.integers(min_value=-(2**80), max_value=2**80)
    | st.floats()
    | st.text(max_size=12)
    | st.builds(slice, st.none() | st.integers(-3, 3), st.none() | st.integers(-3, 3))
    | st.just(Ellipsis)
    | st.sampled_from([torch.float16, torch.device("cpu"), torch.Size([2, 3])])
)
values = st.recursive(
    leaves,
    lambda inner: (
        st.lists(inner, max_size=3) | st.tuples(inner, inner) | st.dictionaries(st.text(max_size=6), inner, max_size=3)
    ),
    max_leaves=12,
)
keywords = st.dictionaries(st.text(min_size=1, max_size=8).filter(lambda k: k not in ("out", "inplace")), values,
                           max_size=3)  # fmt: skip


@FUZZ
@given(args=st.lists(values, max_size=4).map(tuple), kwargs=keywords, output=values)
def test_the_fast_path_encodes_any_arguments_as_the_python_recorder(tmp_path_factory, args, kwargs, output):
    folder = tmp_path_factory.mktemp("fast_path")
    by_fast_path = record_call(folder / "fast_path", True, args, kwargs, output)
    by_python = record_call(folder / "python", False, args, kwargs, output)
    assert json.dumps(by_fast_path) == json.dumps(by_python)  # as text: a NaN equals itself there


@FUZZ
@given(args=st.lists(values, max_size=4).map(tuple), kwargs=keywords, output=values)
def test_on_the_device_path_the_fast_path_encodes_any_arguments_as_the_python_recorder(
    tmp_path_factory, args, kwargs, output
):
    """The same with device statistics in batches (forced on the CPU): the fast path writes each tensor's summary
    with a token for its statistics, filled in at the step's read-back."""
    folder = tmp_path_factory.mktemp("fast_path_device")
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(device_batch, "FORCE_DEVICE_PATH", True)
        by_fast_path = record_call(folder / "fast_path", True, args, kwargs, output)
        by_python = record_call(folder / "python", False, args, kwargs, output)
    assert json.dumps(by_fast_path) == json.dumps(by_python)
    assert len(PLACEHOLDERS) == 0  # every token filled in
