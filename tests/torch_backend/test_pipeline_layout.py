"""Pipeline stages merged into the one global run: a model split over two processes (gloo), each running its
own layers and handing activations forward and gradients back, against the same model in one process.

Expected values: numpy's statistics of the tensors each stage computed (saved by the test itself), the
one-process run, and, for the faults, where the test put them.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
import torch
import torch.distributed as dist
import torch.multiprocessing as mp
import torch.nn.functional as F
from click.testing import CliRunner
from ports import gloo_group, unused_port
from torch import nn

from msprobe.cli.main import cli

WIDTH, LAYERS, BATCH = 16, 4, 8


class Block(nn.Module):
    """A residual block; ``normed``: its branch begins with a layer norm, as a transformer's does."""

    def __init__(self, normed: bool = False):
        super().__init__()
        self.ln = nn.LayerNorm(WIDTH) if normed else None
        self.fc = nn.Linear(WIDTH, WIDTH)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x + F.gelu(self.fc(self.ln(x) if self.ln is not None else x))


class Net(nn.Module):
    """Four residual blocks and a classifier; as stage ``stage`` of ``stages`` it keeps its share of the blocks
    under their global names (the head on the last stage), as pipeline frameworks split a model."""

    def __init__(self, stage: int | None = None, stages: int = 1, normed: bool = False):
        super().__init__()
        torch.manual_seed(0)
        self.layers = nn.ModuleDict({str(index): Block(normed) for index in range(LAYERS)})
        self.head: nn.Module | None = nn.Linear(WIDTH, 4)
        if stage is not None:
            per = LAYERS // stages
            for index in range(LAYERS):
                if not stage * per <= index < (stage + 1) * per:
                    del self.layers[str(index)]
            if stage != stages - 1:
                self.head = None

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        for layer in self.layers.values():
            x = layer(x)
        return self.head(x) if self.head is not None else x


def _batch() -> tuple[torch.Tensor, torch.Tensor]:
    generator = torch.Generator().manual_seed(1)
    return torch.randn(BATCH, WIDTH, generator=generator), torch.randint(0, 4, (BATCH,), generator=generator)


def _debugger(root: str, rank: int, model: nn.Module, task: str):
    from msprobe.pytorch import PrecisionDebugger

    path = Path(root).with_name(f"{Path(root).name}.{rank}.json")
    path.write_text(json.dumps({"task": task, "level": "mix", "dump_path": root}))
    return PrecisionDebugger(config_path=str(path), model=model)


def _golden(root: str, task: str, normed: bool = False) -> None:
    model = Net(normed=normed)
    inputs, targets = _batch()
    debugger = _debugger(root, 0, model, task)
    debugger.start()
    F.cross_entropy(model(inputs), targets).backward()
    debugger.stop()
    debugger.step()


def _corrupted(tensor: torch.Tensor) -> torch.Tensor:
    """The tensor as a faulty transfer delivers it: changed outside torch, so no call of it is recorded."""
    return torch.from_numpy(tensor.numpy() * np.float32(1.01))


def _stages(rank: int, world: int, root: str, port: int) -> None:
    """Every run of RUNS, one after another, in one process group (starting one costs seconds)."""
    with gloo_group(rank, world, port):
        for name, (task, fault) in RUNS.items():
            if name.startswith("microbatches"):
                _stage_microbatches(rank, str(Path(root) / name), task, fault)
            else:
                _stage(rank, world, str(Path(root) / name), task, fault, normed=name.startswith("normed"))
            dist.barrier()


MICROBATCHES = 2


def _microbatches() -> list[tuple[torch.Tensor, torch.Tensor]]:
    inputs, targets = _batch()
    return list(zip(inputs.chunk(MICROBATCHES), targets.chunk(MICROBATCHES)))


def _golden_accumulated(root: str, task: str) -> None:
    """The one-process run of the pipeline's microbatches: each microbatch's forward and backward in turn, the
    gradients accumulated, as a pipeline framework runs a model on one stage."""
    model = Net()
    microbatches = _microbatches()
    debugger = _debugger(root, 0, model, task)
    debugger.start()
    for inputs, targets in microbatches:
        (F.cross_entropy(model(inputs), targets) / MICROBATCHES).backward()
    debugger.stop()
    debugger.step()


def _stage_microbatches(rank: int, root: str, task: str, fault: str | None) -> None:
    """Two stages, two microbatches, one forward then one backward (1F1B): stage 0 runs both forwards before
    the first backward comes back, stage 1 each microbatch's forward and backward in turn. ``fault``:
    ``activation``: the second microbatch's activation arrives changed."""
    model = Net(rank, 2)
    first = next(iter(model.layers.values())).fc
    outputs: list[torch.Tensor] = []
    first.register_forward_hook(lambda module, args, out: outputs.append(out))
    microbatches = _microbatches()
    debugger = _debugger(root, rank, model, task)
    debugger.start()
    sends = []
    if rank == 0:
        hidden = []
        for index, (inputs, _) in enumerate(microbatches):
            hidden.append(model(inputs))
            sent = hidden[-1].detach()
            sends.append(dist.isend(_corrupted(sent) if fault == "activation" and index == 1 else sent, 1))
        for handed in hidden:
            gradient = torch.empty_like(handed)
            dist.recv(gradient, 1)
            handed.backward(gradient)
    else:
        for _, targets in microbatches:
            handed = torch.empty(BATCH // MICROBATCHES, WIDTH)
            dist.recv(handed, 0)
            handed.requires_grad_()
            (F.cross_entropy(model(handed), targets) / MICROBATCHES).backward()
            sends.append(dist.isend(handed.grad, 0))
    for request in sends:
        request.wait()
    debugger.stop()
    debugger.step()
    for index, output in enumerate(outputs):
        np.save(f"{root}.{rank}.first{index}.npy", output.detach().numpy())


def _stage(rank: int, world: int, root: str, task: str, fault: str | None, normed: bool = False) -> None:
    model = Net(rank, world, normed)
    if fault == "weight" and rank == 1:
        with torch.no_grad():
            model.layers["2"].fc.weight.mul_(1.01)
    first = next(iter(model.layers.values())).fc  # the stage's first linear: its output is checked by hand
    outputs: list[torch.Tensor] = []
    first.register_forward_hook(lambda module, args, out: outputs.append(out))
    inputs, targets = _batch()
    debugger = _debugger(root, rank, model, task)
    debugger.start()
    if rank == 0:
        hidden = model(inputs)
        sent = hidden.detach()
        if fault == "scaled":  # a call of the user's own code on the hand-off
            sent = sent * 1.01
        dist.send(_corrupted(sent) if fault == "activation" else sent, 1)
        gradient = torch.empty_like(hidden)
        dist.recv(gradient, 1)
        hidden.backward(gradient)
    else:
        hidden = torch.empty(BATCH, WIDTH)
        dist.recv(hidden, 0)
        hidden.requires_grad_()
        F.cross_entropy(model(hidden), targets).backward()
        dist.send(_corrupted(hidden.grad) if fault == "gradient" else hidden.grad, 0)
    debugger.stop()
    debugger.step()
    np.save(f"{root}.{rank}.first.npy", outputs[0].detach().numpy())  # saved once the dump is over


RUNS = {"control": ("statistics", None), "tensors": ("tensor", None), "weight": ("statistics", "weight"),
        "activation": ("statistics", "activation"), "gradient": ("statistics", "gradient"),
        "scaled": ("statistics", "scaled"), "microbatches": ("statistics", None),
        "microbatches_activation": ("statistics", "activation"),
        # blocks that begin with a layer norm, which divides the activation's change of scale away
        "normed_control": ("statistics", None), "normed_activation": ("statistics", "activation"),
        "normed_gradient": ("statistics", "gradient")}  # fmt: skip


@pytest.fixture(scope="module")
def runs(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("pipeline")
    for task in ("statistics", "tensor"):
        _golden(str(root / f"golden_{task}"), task)
    _golden_accumulated(str(root / "golden_microbatches"), "statistics")
    _golden(str(root / "golden_normed"), "statistics", normed=True)
    mp.spawn(_stages, (2, str(root), unused_port()), nprocs=2, join=True)
    return root


def _compare(runs: Path, run: str, tmp_path: Path, golden_name: str | None = None):
    if golden_name is None:
        golden_name = "golden_microbatches" if run.startswith("microbatches") else f"golden_{RUNS[run][0]}"
        golden_name = "golden_normed" if run.startswith("normed") else golden_name
    golden = runs / golden_name
    spec = tmp_path / "compare.json"
    spec.write_text(json.dumps({"npu_path": str(runs / run), "bench_path": str(golden)}))
    out = tmp_path / "out"
    result = CliRunner().invoke(cli, ["compare", "-i", str(spec), "-o", str(out), "--first-divergence"])
    answer = json.loads(next(out.glob("first_divergence_*.json")).read_text()) if out.is_dir() else None
    return result, answer, out


def _merged(out: Path) -> dict:
    return json.loads((out / "merged_npu" / "step0" / "rank" / "dump.json").read_text())


def test_the_stages_merge_into_the_one_process_run(runs, tmp_path):
    result, answer, out = _compare(runs, "control", tmp_path)
    assert result.exit_code == 0, result.output
    [line] = [line for line in result.output.splitlines() if line.startswith("step 0: ")]
    assert line.startswith("step 0: PASS") and " 0 unmatched" in line, line
    merged = _merged(out)
    stages = merged["parallel"]["pipeline_stages"]
    assert stages == {"0": ["layers.0", "layers.0.fc", "layers.1", "layers.1.fc"],
                      "1": ["head", "layers.2", "layers.2.fc", "layers.3", "layers.3.fc"]}  # fmt: skip
    # stage 1's first linear is the global run's third: counted on from stage 0's two
    for rank, entry in ((0, "Functional.linear.0.forward"), (1, "Functional.linear.2.forward")):
        output = merged["data"][entry]["output"][0]
        expected = np.load(runs / f"control.{rank}.first.npy").astype(np.float64)
        assert output["Max"] == pytest.approx(expected.max(), rel=1e-6)
        assert output["Min"] == pytest.approx(expected.min(), rel=1e-6)
        assert output["Mean"] == pytest.approx(expected.mean(), rel=1e-5)
    # the hand-offs between the stages are the layout's own: not calls of the global run
    assert not [name for name in merged["data"] if name.startswith("Distributed.")]
    order = list(merged["data"])  # the backward runs the stages last to first
    assert order.index("Functional.linear.2.backward") < order.index("Functional.linear.1.backward")
    assert answer["verdict"] != "divergence"


def test_a_tensor_dump_of_stages_merges_its_files(runs, tmp_path):
    result, _, out = _compare(runs, "tensors", tmp_path)
    assert result.exit_code == 0, result.output
    merged = _merged(out)
    leaf = merged["data"]["Functional.linear.2.forward"]["output"][0]
    assert leaf["data_name"].startswith("Functional.linear.2.forward")
    saved = out / "merged_npu" / "step0" / "rank" / "dump_tensor_data" / leaf["data_name"]
    array = torch.load(saved) if saved.suffix == ".pt" else np.load(saved)
    np.testing.assert_array_equal(np.asarray(array), np.load(runs / "tensors.1.first.npy"))


@pytest.mark.parametrize(
    ("run", "rank", "module", "api", "phase"),
    [("weight", 1, "layers.2.fc", "Functional.linear.2.forward", "forward"),  # a stage's own weight
     ("activation", 1, "layers.2.fc", "Functional.linear.2.forward", "forward"),  # the activation handed on
     ("gradient", 0, "layers.1", "Tensor.__add__.1.backward", "backward"),  # the gradient handed back
     ("scaled", 0, None, "Tensor.__mul__.0.forward", "forward")],  # a call the global run does not make
)  # fmt: skip
def test_a_fault_in_one_stage_is_named_with_its_rank(runs, tmp_path, run, rank, module, api, phase):
    result, answer, _ = _compare(runs, run, tmp_path)
    assert result.exit_code == 1, result.output
    assert answer["verdict"] == "divergence", answer
    assert (answer["rank"], answer["module"], answer["api"], answer["phase"]) == (rank, module, api, phase), answer
    assert f"rank {rank} alone" in result.output


def test_an_activation_a_norm_scales_back_is_named_where_the_stage_receives_it(runs, tmp_path):
    """The activation handed to stage 1 arrives 1% larger; stage 1 begins with a layer norm, whose output rounds
    nearly the same, while the residual carries the change on. The difference is the input's, far beyond the
    rounding of sums taken in another order, and is named at the call given it, on the rank that received it."""
    (tmp_path / "control").mkdir()
    (tmp_path / "fault").mkdir()
    result, answer, _ = _compare(runs, "normed_control", tmp_path / "control")
    assert result.exit_code == 0 and answer["verdict"] != "divergence", result.output
    result, answer, _ = _compare(runs, "normed_activation", tmp_path / "fault")
    assert result.exit_code == 1, result.output
    found = (answer["rank"], answer["module"], answer["api"], answer["phase"])
    assert found == (1, "layers.2.ln", "Functional.layer_norm.2.forward", "forward"), answer


def test_a_gradient_handed_back_changed_is_named_where_the_stage_receives_it_beside_rounding(runs, tmp_path):
    """The gradient handed back to stage 0 arrives 1% larger. Stage 1's norms sum their weights' gradients in
    another order than the one-process run, so a rounding difference comes first in time; the first backward
    given a gradient no dumped call made, beyond that rounding, is where the fault entered."""
    result, answer, _ = _compare(runs, "normed_gradient", tmp_path)
    assert result.exit_code == 1, result.output
    found = (answer["rank"], answer["module"], answer["api"], answer["phase"])
    assert found == (0, "layers.1", "Tensor.__add__.1.backward", "backward"), answer


def test_microbatches_merge_in_the_order_the_one_process_run_makes_them(runs, tmp_path):
    result, answer, out = _compare(runs, "microbatches", tmp_path)
    assert result.exit_code == 0, result.output
    [line] = [line for line in result.output.splitlines() if line.startswith("step 0: ")]
    assert line.startswith("step 0: PASS") and " 0 unmatched" in line, line
    data = _merged(out)["data"]
    # five linears a microbatch (two on stage 0, three on stage 1): each stage's first linear, microbatch by
    # microbatch, is the global run's 0th, 2nd, 5th and 7th
    for rank, index, entry in ((0, 0, 0), (1, 0, 2), (0, 1, 5), (1, 1, 7)):
        output = data[f"Functional.linear.{entry}.forward"]["output"][0]
        expected = np.load(runs / f"microbatches.{rank}.first{index}.npy").astype(np.float64)
        assert output["Max"] == pytest.approx(expected.max(), rel=1e-6), (rank, index)
        assert output["Mean"] == pytest.approx(expected.mean(), rel=1e-5, abs=1e-7), (rank, index)
    order = list(data)  # the first microbatch's backward before the second's forward, as in the global run
    assert order.index("Functional.linear.4.backward") < order.index("Functional.linear.0.backward")
    assert order.index("Functional.linear.0.backward") < order.index("Functional.linear.5.forward")
    assert answer["verdict"] != "divergence"


def test_a_fault_in_one_microbatch_is_named_at_its_call(runs, tmp_path):
    result, answer, _ = _compare(runs, "microbatches_activation", tmp_path)
    assert result.exit_code == 1, result.output
    found = (answer["rank"], answer["module"], answer["api"], answer["phase"])
    assert found == (1, "layers.2.fc", "Functional.linear.7.forward", "forward"), answer


# -- a pipeline of two stages, each data parallel over two ranks (four processes) -----------------------------
# ranks 0 and 1 run stage 0 (one data-parallel group), 2 and 3 stage 1; rank r hands its activation to r + 2


def _replica_stage(rank: int, root: str, groups: list, fault: str | None) -> None:
    stage, replica = divmod(rank, 2)
    model = Net(stage, 2)
    wrapped = nn.parallel.DistributedDataParallel(model, process_group=groups[stage])
    if fault == "desync" and rank == 3:  # one replica's copy of a stage-1 weight out of step (after DDP's broadcast)
        with torch.no_grad():
            model.layers["2"].fc.weight.mul_(1.01)
    inputs, targets = (part.chunk(2)[replica] for part in _batch())
    debugger = _debugger(root, rank, wrapped, "statistics")
    debugger.start()
    if stage == 0:
        hidden = wrapped(inputs)
        dist.send(hidden.detach(), rank + 2)
        gradient = torch.empty_like(hidden)
        dist.recv(gradient, rank + 2)
        hidden.backward(gradient)
    else:
        handed = torch.empty(BATCH // 2, WIDTH)
        dist.recv(handed, rank - 2)
        handed.requires_grad_()
        F.cross_entropy(wrapped(handed), targets).backward()
        dist.send(handed.grad, rank - 2)
    debugger.stop()
    debugger.step()


def _replicas(rank: int, world: int, root: str, port: int) -> None:
    with gloo_group(rank, world, port):
        groups = [dist.new_group([0, 1]), dist.new_group([2, 3])]
        for name, fault in (("replicas", None), ("replicas_desync", "desync")):
            _replica_stage(rank, str(Path(root) / name), groups, fault)
            dist.barrier()


@pytest.fixture(scope="module")
def replica_runs(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("pipeline_dp")
    _golden(str(root / "golden"), "statistics")
    mp.spawn(_replicas, (4, str(root), unused_port()), nprocs=4, join=True)
    return root


def test_data_parallel_stages_merge_into_the_one_process_run(replica_runs, tmp_path):
    result, answer, out = _compare(replica_runs, "replicas", tmp_path, "golden")
    assert result.exit_code == 0, result.output
    [line] = [line for line in result.output.splitlines() if line.startswith("step 0: ")]
    assert line.startswith("step 0: PASS") and " 0 unmatched" in line, line
    merged = _merged(out)
    assert merged["parallel"]["pipeline_replicas"] == [[0, 2], [1, 3]]
    golden = json.loads((replica_runs / "golden" / "step0" / "rank" / "dump.json").read_text())["data"]
    assert sorted(merged["data"]) == sorted(golden)
    # the global batch: each replica's four rows side by side, as the golden run's eight
    assert merged["data"]["Functional.linear.2.forward"]["output"][0]["shape"] == [BATCH, WIDTH]
    assert answer["verdict"] != "divergence"


def test_a_replica_out_of_step_is_named_with_the_rank_of_its_stage(replica_runs, tmp_path):
    result, answer, _ = _compare(replica_runs, "replicas_desync", tmp_path, "golden")
    assert result.exit_code == 1, result.output
    assert answer["verdict"] == "divergence" and answer["module"] == "layers.2.fc", answer
    assert answer["ranks"] == [3] and answer["cause"] == "ranks", answer
    assert "where rank 2's is" in answer["answer"], answer  # the other replica's copy, on the rank that holds it
