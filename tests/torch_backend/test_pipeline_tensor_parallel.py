"""Pipeline stages that are each tensor parallel, as Megatron runs them: four processes (gloo), two stages of two
tensor-parallel ranks each, plain tensors merged by the layout config.json declares, against the same model in
one process.

Expected values: numpy's statistics of the column-parallel output gathered by hand from the stage's ranks (saved
by the test itself), the one-process run, and, for the faults, where the test put them.
"""

from __future__ import annotations

import csv
import json
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
from torch import nn

sys.path.insert(0, str(REPO_ROOT / "bench"))
from megatron_layers import ColumnLinear, RowLinear

from msprobe.cli.main import cli

WIDTH, HIDDEN, CLASSES, BATCH = 8, 32, 4, 6
STAGES, TP = 2, 2
LAYOUT = {"*.fc1": {"weight": 0, "bias": 0, "output": -1}, "*.fc2": {"weight": 1, "calls": "partial"}}


class Block(nn.Module):
    """A Megatron MLP block with its residual: fc1 split by rows (column-parallel), fc2 by columns."""

    def __init__(self, generator: torch.Generator, tp_rank: int, tp: int, group: object):
        super().__init__()
        w1, b1 = torch.randn(HIDDEN, WIDTH, generator=generator), torch.randn(HIDDEN, generator=generator)
        w2, b2 = torch.randn(WIDTH, HIDDEN, generator=generator) / 4, torch.randn(WIDTH, generator=generator)
        mine = slice(tp_rank * HIDDEN // tp, (tp_rank + 1) * HIDDEN // tp)
        self.fc1 = ColumnLinear(w1[mine].clone(), b1[mine].clone(), tp, group)
        self.fc2 = RowLinear(w2[:, mine].clone(), b2.clone(), tp, group=group)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x + self.fc2(F.gelu(self.fc1(x)))


class Net(nn.Module):
    """Two blocks and a classifier; as stage ``stage`` it keeps its block (the classifier on the last stage),
    its tensor-parallel rank's shards of it."""

    def __init__(self, stage: int | None = None, tp_rank: int = 0, tp: int = 1, group: object = None):
        super().__init__()
        generator = torch.Generator().manual_seed(0)
        blocks = {str(index): Block(generator, tp_rank, tp, group) for index in range(STAGES)}
        head = nn.Linear(WIDTH, CLASSES)
        with torch.no_grad():
            head.weight.copy_(torch.randn(CLASSES, WIDTH, generator=generator))
            head.bias.copy_(torch.randn(CLASSES, generator=generator))
        if stage is not None:
            blocks = {str(stage): blocks[str(stage)]}
        self.blocks = nn.ModuleDict(blocks)
        self.head = head if stage in (None, STAGES - 1) else None

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        for block in self.blocks.values():
            x = block(x)
        return self.head(x) if self.head is not None else x


def _batch() -> tuple[torch.Tensor, torch.Tensor]:
    generator = torch.Generator().manual_seed(1)
    return torch.randn(BATCH, WIDTH, generator=generator), torch.randint(0, CLASSES, (BATCH,), generator=generator)


def _debugger(root: str, rank: int, model: nn.Module, task: str, group: list[int] | None):
    from msprobe.pytorch import PrecisionDebugger

    config: dict = {"task": task, "level": "mix", "dump_path": root}
    if group is not None:
        config["tensor_parallel"] = {"ranks": group, "modules": LAYOUT}
    path = Path(root).with_name(f"{Path(root).name}.{rank}.json")
    path.write_text(json.dumps(config))
    return PrecisionDebugger(config_path=str(path), model=model)


def _golden(root: str, task: str) -> None:
    model = Net()
    inputs, targets = _batch()
    debugger = _debugger(root, 0, model, task, None)
    debugger.start()
    F.cross_entropy(model(inputs), targets).backward()
    debugger.stop()
    debugger.step()


def _stage(rank: int, root: str, task: str, fault: str | None, groups: list) -> None:
    stage, tp_rank = divmod(rank, TP)
    members = [stage * TP + index for index in range(TP)]
    model = Net(stage, tp_rank, TP, groups[stage])
    if fault == "weight" and stage == 1:  # the stage's own weight, on both of its ranks
        with torch.no_grad():
            model.blocks["1"].fc1.weight.mul_(1.01)
    if fault == "desync" and rank == 3:  # a bias every rank of the group holds whole, out of step on one
        with torch.no_grad():
            model.blocks["1"].fc2.bias.add_(0.01)
    outputs: list[torch.Tensor] = []
    model.blocks[str(stage)].fc1.register_forward_hook(lambda module, args, out: outputs.append(out))
    inputs, targets = _batch()
    debugger = _debugger(root, rank, model, task, members)
    debugger.start()
    if stage == 0:
        hidden = model(inputs)
        dist.send(hidden.detach(), rank + TP)
        gradient = torch.empty_like(hidden)
        dist.recv(gradient, rank + TP)
        hidden.backward(gradient)
    else:
        hidden = torch.empty(BATCH, WIDTH)
        dist.recv(hidden, rank - TP)
        hidden.requires_grad_()
        F.cross_entropy(model(hidden), targets).backward()
        dist.send(hidden.grad, rank - TP)
    debugger.stop()
    debugger.step()
    np.save(f"{root}.{rank}.fc1.npy", outputs[0].detach().numpy())


RUNS = {"control": ("statistics", None), "tensors": ("tensor", None), "weight": ("statistics", "weight"),
        "desync": ("statistics", "desync")}  # fmt: skip


def _ranks(rank: int, world: int, root: str, port: int) -> None:
    with gloo_group(rank, world, port):
        groups = [dist.new_group([stage * TP + index for index in range(TP)]) for stage in range(STAGES)]
        for name, (task, fault) in RUNS.items():
            _stage(rank, str(Path(root) / name), task, fault, groups)
            dist.barrier()


@pytest.fixture(scope="module")
def runs(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("pp_tp")
    for task in ("statistics", "tensor"):
        _golden(str(root / f"golden_{task}"), task)
    mp.spawn(_ranks, (STAGES * TP, str(root), unused_port()), nprocs=STAGES * TP, join=True)
    return root


def _compare(runs: Path, run: str, tmp_path: Path):
    golden = runs / f"golden_{RUNS[run][0]}"
    spec = tmp_path / "compare.json"
    spec.write_text(json.dumps({"npu_path": str(runs / run), "bench_path": str(golden)}))
    out = tmp_path / "out"
    result = CliRunner().invoke(cli, ["compare", "-i", str(spec), "-o", str(out), "--first-divergence"])
    assert "Traceback" not in result.output, result.output
    written = next(out.glob("first_divergence_*.json"), None) if out.is_dir() else None
    return result, json.loads(written.read_text()) if written else None, out


def test_tensor_parallel_stages_merge_into_the_one_process_run(runs, tmp_path):
    result, answer, out = _compare(runs, "control", tmp_path)
    assert result.exit_code == 0, result.output
    [line] = [line for line in result.output.splitlines() if line.startswith("step 0: ")]
    assert line.startswith("step 0: PASS"), line
    assert answer["verdict"] != "divergence"
    # the one call the global run does not make is the identity the copy into the tensor-parallel region
    # returns (torch records an autograd Function's unchanged input as a view of it): the layout's own
    [table] = (out / "step0").glob("compare_result_*.csv")
    with table.open() as rows:
        unmatched = {row["NPU Name"].split(".forward")[0] for row in csv.DictReader(rows) if row["Bench Name"] == "N/A"}
    assert unmatched == {"Tensor.view_as.0"}, unmatched
    merged = json.loads((out / "merged_npu" / "step0" / "rank" / "dump.json").read_text())
    assert merged["parallel"]["pipeline_tensor_parallel"] == [[0, 1], [2, 3]]
    # each stage's column-parallel output, gathered by hand from its two ranks: the second stage's is the
    # global run's third linear, counted on from the first stage's two
    for stage, entry in ((0, "Functional.linear.0.forward"), (1, "Functional.linear.2.forward")):
        pieces = [np.load(runs / f"control.{stage * TP + index}.fc1.npy") for index in range(TP)]
        whole = np.concatenate(pieces, axis=-1).astype(np.float64)
        output = merged["data"][entry]["output"][0]
        assert output["shape"] == list(whole.shape)
        assert output["Max"] == pytest.approx(whole.max(), rel=1e-6)
        assert output["Min"] == pytest.approx(whole.min(), rel=1e-6)
        assert output["Mean"] == pytest.approx(whole.mean(), rel=1e-5, abs=1e-7)
    assert not [name for name in merged["data"] if name.startswith("Distributed.")]


def test_a_stage_s_own_weight_is_named_with_the_ranks_of_its_stage(runs, tmp_path):
    result, answer, _ = _compare(runs, "weight", tmp_path)
    assert result.exit_code == 1, result.output
    found = (answer["module"], answer["api"], answer["phase"], answer["ranks"])
    assert found == ("blocks.1.fc1", "Functional.linear.2.forward", "forward", [2, 3]), answer
    assert "(step 0, ranks 2, 3, forward, module blocks.1.fc1)" in result.output  # the line says what the JSON does


def test_a_replica_out_of_step_inside_a_stage_is_named_with_its_rank(runs, tmp_path):
    result, answer, _ = _compare(runs, "desync", tmp_path)
    assert result.exit_code == 1, result.output
    assert answer["rank"] == 3 and answer["module"] == "blocks.1.fc2", answer
    assert "rank 3" in result.output


def test_a_tensor_dump_of_tensor_parallel_stages_is_one_clear_error(runs, tmp_path):
    result, _, _ = _compare(runs, "tensors", tmp_path)
    assert result.exit_code == 2, result.output
    assert "pipeline stages that are also tensor parallel merge from their statistics" in result.output
