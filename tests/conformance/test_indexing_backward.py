"""`w[idx]` with a 2-D index tensor: what each tool records as the backward of Tensor.__getitem__.

docs/differences.md: the reference writes the gradient arriving at the result, cut along its first dimension
(one [3, 4] piece per index row); ours writes the gradient of ``w``, the input that needs one, as for every
other call. Autograd, run in the same script, is the oracle for both.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
import torch
from conftest import reference_python

DRIVER = Path(__file__).resolve().parent / "dump_indexing.py"


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    folder = tmp_path_factory.mktemp("indexing")
    for tool, python in (("reference", reference_python()), ("ours", sys.executable)):
        done = subprocess.run([python, str(DRIVER), str(folder / tool)], capture_output=True, text=True, timeout=300)
        assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    return folder


def _backward_outputs(root: Path) -> list[torch.Tensor]:
    files = sorted(
        (root / "dump" / "step0" / "rank" / "dump_tensor_data").glob("Tensor.__getitem__.0.backward.output.*")
    )
    return [torch.load(path, weights_only=True) for path in files]


def test_ours_records_the_gradient_of_the_indexed_tensor(runs):
    expected = torch.load(runs / "ours" / "expected.pt", weights_only=True)
    [gradient] = _backward_outputs(runs / "ours")
    assert torch.equal(gradient, expected["w"])


def test_the_reference_records_the_arriving_gradient_cut_by_index_rows(runs):
    expected = torch.load(runs / "reference" / "expected.pt", weights_only=True)
    pieces = _backward_outputs(runs / "reference")
    assert len(pieces) == 2 and all(torch.equal(p, a) for p, a in zip(pieces, expected["arriving"], strict=True))
