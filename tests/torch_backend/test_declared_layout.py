"""A Megatron-style tensor-parallel run of plain tensors, merged by the layout config.json declares.

Column- and row-parallel linear layers written as Megatron writes them (each rank holds rows of the first
weight and columns of the second, and the second's partial sums are all-reduced before its bias is added),
over two processes (gloo), against the same model in one process. Expected values: numpy's statistics of the
global tensors, and the one-process run.
"""

from __future__ import annotations

import json
import math
import sys
from pathlib import Path

import numpy as np
import pytest
import torch
import torch.distributed as dist
import torch.multiprocessing as mp
import torch.nn.functional as F
from click.testing import CliRunner
from ports import gloo_group, unused_port
from repo_paths import REPO_ROOT

sys.path.insert(0, str(REPO_ROOT / "bench"))
from megatron_layers import ColumnLinear, RowLinear

from msprobe.cli.main import cli

HIDDEN, WIDTH = 16, 8
LAYOUT = {"modules": {"fc1": {"weight": 0, "bias": 0, "output": -1}, "fc2": {"weight": 1, "calls": "partial"}}}


class MegatronMLP(torch.nn.Module):
    def __init__(self, rank: int, world: int, reduce: bool = True):
        super().__init__()
        torch.manual_seed(0)
        w1, b1, w2, b2 = torch.randn(HIDDEN, WIDTH), torch.randn(HIDDEN), torch.randn(WIDTH, HIDDEN), torch.randn(WIDTH)
        mine = slice(rank * HIDDEN // world, (rank + 1) * HIDDEN // world)
        self.fc1 = ColumnLinear(w1[mine].clone(), b1[mine].clone())
        self.fc2 = RowLinear(w2[:, mine].clone(), b2.clone(), world if reduce else 1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.fc2(F.gelu(self.fc1(x)))


def _train(rank: int, world: int, root: str, declared: bool, reduce: bool = True) -> None:
    from msprobe.pytorch import PrecisionDebugger

    model = MegatronMLP(rank, world, reduce)
    x = torch.randn(4, WIDTH, generator=torch.Generator().manual_seed(1))
    config = {"task": "statistics", "level": "mix", "dump_path": root}
    if declared:
        config["tensor_parallel"] = LAYOUT
    path = Path(root).with_name(f"{Path(root).name}.{rank}.json")
    path.write_text(json.dumps(config))
    debugger = PrecisionDebugger(config_path=str(path), model=model)
    debugger.start()
    hidden = model.fc1(x)
    model.fc2(F.gelu(hidden)).pow(2).mean().backward()
    debugger.stop()
    debugger.step()
    if world > 1:
        pieces = [torch.empty_like(hidden) for _ in range(world)]
        dist.all_gather(pieces, hidden.detach().contiguous())
        if rank == 0:
            np.save(f"{root}.fc1_output.npy", torch.cat(pieces, dim=-1).numpy())


RUNS = (("declared", True, True), ("undeclared", False, True), ("unreduced", True, False))


def _rank(rank: int, world: int, root: str, port: int) -> None:
    """Every run of RUNS, one after another, in one process group (starting one costs seconds)."""
    with gloo_group(rank, world, port):
        for name, declared, reduce in RUNS:
            _train(rank, world, str(Path(root) / name), declared, reduce)
            dist.barrier()


@pytest.fixture(scope="module")
def runs(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("megatron")
    _train(0, 1, str(root / "golden"), declared=False)
    mp.spawn(_rank, (2, str(root), unused_port()), nprocs=2, join=True)
    return root


def _compare(runs: Path, run: str, tmp_path: Path):
    spec = tmp_path / "compare.json"
    spec.write_text(json.dumps({"npu_path": str(runs / run), "bench_path": str(runs / "golden")}))
    return CliRunner().invoke(cli, ["compare", "-i", str(spec), "-o", str(tmp_path / "out"), "--first-divergence"])


def test_a_declared_layout_merges_the_ranks_into_the_one_process_run(runs, tmp_path):
    result = _compare(runs, "declared", tmp_path)
    assert result.exit_code == 0, result.output
    [line] = [line for line in result.output.splitlines() if line.startswith("step 0: ")]
    assert line.startswith("step 0: PASS") and " 0 unmatched" in line, line
    merged = json.loads((tmp_path / "out" / "merged_npu" / "step0" / "rank" / "dump.json").read_text())["data"]
    golden = json.loads((runs / "golden" / "step0" / "rank" / "dump.json").read_text())["data"]
    assert list(merged) == list(golden)  # the layout's all-reduce is its own, as the golden run has none
    # the row-parallel product's partial sums, added up: the golden run's product, to a sum's rounding
    product = "Functional.linear.1.forward"
    ours, theirs = merged[product]["output"][0], golden[product]["output"][0]
    assert ours["shape"] == theirs["shape"] == [4, WIDTH]
    assert math.isclose(ours["Mean"], theirs["Mean"], rel_tol=1e-5, abs_tol=1e-6)
    # the column-parallel output, side by side: numpy's statistics of the gathered tensor
    output = merged["Module.fc1.ColumnLinear.forward.0"]["output"][0]
    gathered = np.load(runs / "declared.fc1_output.npy").astype(np.float64)
    assert output["shape"] == [4, HIDDEN] and output["Max"] == float(gathered.max())
    assert math.isclose(output["Sum"], float(gathered.sum()), rel_tol=1e-12, abs_tol=1e-9)
    # the parameters and their gradients by the dimension declared: rows of fc1, columns of fc2
    grads = merged["Module.fc2.RowLinear.parameters_grad"]
    assert grads["weight"][0]["shape"] == [WIDTH, HIDDEN] and grads["bias"][0]["shape"] == [WIDTH]
    assert merged["Module.fc1.ColumnLinear.parameters_grad"]["bias"][0]["shape"] == [HIDDEN]


def test_without_the_declared_layout_the_partial_sums_read_as_ranks_that_differ(runs, tmp_path):
    """The control for the declaration: the same dumps with no layout declared cannot be merged right."""
    result = _compare(runs, "undeclared", tmp_path)
    findings = json.loads(next((tmp_path / "out").glob("rank_consistency_*.json")).read_text())
    words = json.dumps(findings)
    assert "Functional.linear.1.forward" in words, result.output


def test_a_forgotten_all_reduce_is_named_at_the_row_parallel_layer(runs, tmp_path):
    result = _compare(runs, "unreduced", tmp_path)
    assert result.exit_code == 1, result.output
    answer = next(line for line in result.output.splitlines() if "part ways" in line)
    assert "fc2" in answer and "Tensor.__add__.0.forward" in answer, answer


def test_a_malformed_declared_layout_in_a_dump_is_one_clear_line(runs, tmp_path):
    import shutil

    run = tmp_path / "run"
    shutil.copytree(runs / "declared", run)
    dump_json = run / "step0" / "rank1" / "dump.json"
    dump = json.loads(dump_json.read_text())
    dump["parallel"]["tensor_parallel"]["modules"]["fc2"] = {"weight": "columns"}
    dump_json.write_text(json.dumps(dump))
    spec = tmp_path / "compare.json"
    spec.write_text(json.dumps({"npu_path": str(run), "bench_path": str(runs / "golden")}))
    result = CliRunner().invoke(cli, ["compare", "-i", str(spec), "-o", str(tmp_path / "out")])
    assert result.exit_code == 2 and "Traceback" not in result.output
    assert "rank 1: parallel.tensor_parallel.modules['fc2'] is not a module's layout" in result.output
