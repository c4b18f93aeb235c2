"""A Megatron-style model of plain tensors (a vocab-parallel embedding, a column- and a row-parallel linear)
over two processes (gloo), merged by the layout config.json declares, against the same model in one process.

The embedding declares its calls its own (``"calls": "own"``): its masking has no counterpart in the global
run's one lookup, so it is compared at its boundary. Expected values: numpy's statistics of the global table,
the one-process run's entry names with its lookup left out, and the module each fault is written in.
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
from megatron_layers import ColumnLinear, RowLinear, VocabParallelEmbedding

from msprobe.cli.main import cli

VOCAB, WIDTH, HEADS, HEAD_DIM = 16, 8, 4, 4
HIDDEN = HEADS * HEAD_DIM
TOKENS = [[0, 3, 7, 8, 9, 15], [15, 8, 0, 4, 12, 7]]  # each shard's first and last rows among them
LAYOUT = {
    "modules": {
        "embed": {"weight": 0, "calls": "own"},
        "fc1": {"weight": 0, "bias": 0, "output": -1},
        "fc2": {"weight": 1, "calls": "partial"},
    }
}


def _table() -> torch.Tensor:
    return torch.randn(VOCAB, WIDTH, generator=torch.Generator().manual_seed(0))


class Model(torch.nn.Module):
    """``fault``: the embedding's (``unmasked``, ``range``), or ``wrong_dim``: fc1's shard cut along the
    head's dimension of its weight viewed ``[heads, head_dim, width]``, where its heads are the ranks' split
    (the same shape, other rows)."""

    def __init__(self, rank: int, world: int, fault: str | None = None):
        super().__init__()
        self.embed = VocabParallelEmbedding(_table(), rank, world, fault)
        generator = torch.Generator().manual_seed(1)
        w1, b1 = torch.randn(HIDDEN, WIDTH, generator=generator), torch.randn(HIDDEN, generator=generator)
        w2, b2 = torch.randn(WIDTH, HIDDEN, generator=generator), torch.randn(WIDTH, generator=generator)
        mine = slice(rank * HIDDEN // world, (rank + 1) * HIDDEN // world)
        if fault == "wrong_dim":
            per_head = slice(rank * HEAD_DIM // world, (rank + 1) * HEAD_DIM // world)
            w1_mine = w1.view(HEADS, HEAD_DIM, WIDTH)[:, per_head].reshape(-1, WIDTH)
            b1_mine = b1.view(HEADS, HEAD_DIM)[:, per_head].reshape(-1)
        else:
            w1_mine, b1_mine = w1[mine], b1[mine]
        self.fc1 = ColumnLinear(w1_mine.clone(), b1_mine.clone(), world)
        self.fc2 = RowLinear(w2[:, mine].clone(), b2.clone(), world)

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        return self.fc2(F.gelu(self.fc1(self.embed(tokens))))


def _train(rank: int, world: int, root: Path, name: str, fault: str | None, task: str) -> None:
    from msprobe.pytorch import PrecisionDebugger

    model = Model(rank, world, fault)
    config = {"task": task, "level": "mix", "dump_path": str(root / name)}
    if world > 1:
        config["tensor_parallel"] = LAYOUT
    path = root / f"{name}.{rank}.json"
    path.write_text(json.dumps(config))
    debugger = PrecisionDebugger(config_path=str(path), model=model)
    debugger.start()
    model(torch.tensor(TOKENS)).pow(2).mean().backward()
    debugger.stop()
    debugger.step()


SHARDED = [
    ("control", None, "statistics"),
    ("unmasked", "unmasked", "statistics"),
    ("range", "range", "statistics"),
    ("wrong_dim", "wrong_dim", "statistics"),
    ("wrong_dim_tensors", "wrong_dim", "tensor"),
]


def _rank(rank: int, world: int, root: Path, port: int) -> None:
    with gloo_group(rank, world, port):
        for name, fault, task in SHARDED:
            _train(rank, world, root, name, fault, task)
            dist.barrier()


@pytest.fixture(scope="module")
def runs(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("vocab")
    _train(0, 1, root, "golden", None, "statistics")
    _train(0, 1, root, "golden_tensors", None, "tensor")
    mp.spawn(_rank, (2, root, unused_port()), nprocs=2, join=True)
    return root


def _compare(runs: Path, run: str, tmp_path: Path, golden: str = "golden"):
    spec = tmp_path / "compare.json"
    spec.write_text(json.dumps({"npu_path": str(runs / run), "bench_path": str(runs / golden)}))
    result = CliRunner().invoke(cli, ["compare", "-i", str(spec), "-o", str(tmp_path / "out"), "--first-divergence"])
    assert "Traceback" not in result.output, result.output
    return result


def _answer(output: str) -> str:
    return next(line for line in output.splitlines() if "part ways" in line and not line.startswith("step "))


def test_the_embedding_is_compared_at_its_boundary(runs, tmp_path):
    result = _compare(runs, "control", tmp_path)
    assert result.exit_code == 0, result.output
    [line] = [line for line in result.output.splitlines() if line.startswith("step 0: ")]
    assert line.startswith("step 0: PASS"), line
    merged = json.loads((tmp_path / "out" / "merged_npu" / "step0" / "rank" / "dump.json").read_text())["data"]
    golden = json.loads((runs / "golden" / "step0" / "rank" / "dump.json").read_text())["data"]
    # the masking and the lookup are left out of both runs; every other call keeps its name. The one call the
    # golden run lacks is the view_as torch makes of an input a custom function returns as it is (Megatron's
    # entry to the column-parallel layer, which a run of one process skips): 3 values unmatched
    lookups = {"Functional.embedding.0.forward", "Functional.embedding.0.backward"}
    assert [name for name in merged if name not in golden] == ["Tensor.view_as.0.forward"]
    assert " 3 unmatched" in line, line
    assert [name for name in merged if name in golden] == [name for name in golden if name not in lookups]
    assert not any(name.startswith(("Tensor.__ge__", "Tensor.__setitem__")) for name in merged)
    # the table, rows side by side: numpy's statistics of the global table
    table = _table().numpy().astype(np.float64)
    weight = merged["Module.embed.VocabParallelEmbedding.forward.0"]["parameters"]["weight"]
    assert weight["shape"] == [VOCAB, WIDTH] and weight["Max"] == float(np.float32(table.max()))
    assert math.isclose(weight["Sum"], float(table.sum()), rel_tol=1e-9, abs_tol=1e-9)
    grad = merged["Module.embed.VocabParallelEmbedding.parameters_grad"]["weight"][0]
    assert grad["shape"] == [VOCAB, WIDTH]


@pytest.mark.parametrize("fault", ["unmasked", "range"])
def test_an_embedding_that_mishandles_tokens_outside_its_rows_is_named(runs, tmp_path, fault):
    result = _compare(runs, fault, tmp_path)
    assert result.exit_code == 1, result.output
    answer = _answer(result.output)
    assert "Module.embed.VocabParallelEmbedding.forward.0" in answer and "module embed" in answer, answer


def test_a_shard_cut_along_the_wrong_dimension_is_named_at_its_weights(runs, tmp_path):
    result = _compare(runs, "wrong_dim_tensors", tmp_path, "golden_tensors")
    assert result.exit_code == 1, result.output
    answer = _answer(result.output)
    assert "Functional.linear.0.forward" in answer and "module fc1" in answer and "weight" in answer, answer


def test_in_statistics_a_wrong_shard_shows_where_its_rows_meet_the_next_layer(runs, tmp_path):
    """Rows of the same weight in another order have the same statistics; the first call whose statistics
    move is the row-parallel product, where the hidden units meet columns of fc2 that are not theirs."""
    result = _compare(runs, "wrong_dim", tmp_path)
    assert result.exit_code == 1, result.output
    answer = _answer(result.output)
    assert "Functional.linear.1.forward" in answer and "module fc2" in answer, answer
