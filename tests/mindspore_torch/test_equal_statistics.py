"""Equal tensors in PyTorch and MindSpore get equal statistics, to the bit: both measure with core's kernels."""

import mindspore as ms
import numpy as np
import torch

from msprobe.core.dump.writer import RawJSON
from msprobe.mindspore.dump.tensors import measure
from msprobe.pytorch.dump.tensors import TensorSummarizer


def test_the_two_backends_report_the_same_bits():
    rng = np.random.default_rng(3)
    summarize = TensorSummarizer("statistics", "statistics")
    for size in (1, 17, 1000, 65536 + 3):
        for dtype in (np.float32, np.float64):
            values = (rng.standard_normal(size) * 5 + 2).astype(dtype)
            from_torch = summarize(torch.from_numpy(values), "x")
            from_torch = from_torch.value() if isinstance(from_torch, RawJSON) else from_torch  # text from the C path
            from_mindspore = measure(ms.Tensor(values))
            for key in ("Max", "Min", "Mean", "Norm"):
                assert from_torch[key] == from_mindspore[key], (size, dtype, key)
