"""MindSpore run_ut with PyTorch installed: the benchmark side is the PyTorch twin in float64.

Runs in the nox session ``mindspore_torch`` (MindSpore, numpy<2 and torch in
one environment); tests/mindspore_backend/test_run_ut.py runs there too.
"""

import mindspore as ms
import numpy as np
import torch

from msprobe.mindspore.run_ut import _input_gradients, _torch_input_gradients, torch_twin


def test_the_twins_are_pytorch_functions():
    assert torch_twin("Mint.matmul") is torch.matmul
    assert torch_twin("MintFunctional.relu") is torch.nn.functional.relu
    assert torch_twin("Tensor.abs") is torch.Tensor.abs


def test_torch_gradients_equal_mindspore_float64_gradients():
    rng = np.random.default_rng(0)
    args = [rng.standard_normal((4, 8)).astype(np.float32), rng.standard_normal((8, 3)).astype(np.float32)]
    grads = [rng.standard_normal((4, 3)).astype(np.float32)]
    from_torch = _torch_input_gradients(torch.matmul, args, {}, [0, 1], grads)
    from_mindspore = _input_gradients(ms.mint.matmul, args, {}, [0, 1], grads, widen=True)
    for ours, theirs in zip(from_torch, from_mindspore):
        assert ours.dtype == np.float64
        np.testing.assert_allclose(ours, theirs, rtol=1e-12)
    np.testing.assert_allclose(from_torch[0], grads[0].astype(np.float64) @ args[1].T.astype(np.float64), rtol=1e-12)
