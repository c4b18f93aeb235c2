"""Which API names say the call writes its first argument (its inputs are then measured before it runs, and a
backend may leave out its backward entry)."""

import pytest

from msprobe.core.recording.recorder import in_place_by_name

WRITES = ["Tensor.add_", "Torch.relu_", "Tensor.__iadd__", "Tensor.__imatmul__", "Tensor.__itruediv__",
          "Tensor.__ior__", "Tensor.__setitem__", "Functional.dropout_"]  # fmt: skip
READS = ["Tensor.__add__", "Tensor.__mul__", "Tensor.__invert__", "Tensor.__index__", "Tensor.__int__",
         "Tensor.__iter__", "Tensor.__getitem__", "Tensor.__radd__", "Torch.add", "Functional.linear",
         "Tensor.__init__"]  # fmt: skip


@pytest.mark.parametrize("key", WRITES)
def test_in_place_names(key):
    assert in_place_by_name(key)


@pytest.mark.parametrize("key", READS)
def test_names_that_only_look_in_place(key):
    assert not in_place_by_name(key)
