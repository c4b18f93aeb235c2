"""A sharded run against a golden run of one process: dumps that know their layout, merged, compared, diagnosed.

Real parts: two processes over gloo on this machine, DTensor tensor parallelism, FSDP2 and DDP, with the models,
layouts and faults of bench/layout_faults.py. The merged statistics are checked against numpy's statistics of
the global tensors gathered by hand in the same run; the diagnosis on the bench's quick subset of faults, each
kind of fault with its own rule.
"""

from __future__ import annotations

import json
import math
import re
import shutil
import sys
from pathlib import Path

import numpy as np
import pytest
import torch
import torch.distributed as dist
import torch.multiprocessing as mp
from click.testing import CliRunner
from repo_paths import REPO_ROOT

sys.path.insert(0, str(REPO_ROOT / "bench"))
import bench_layouts as bench
from layout_faults import CASES, MLP, batch, lay_out, loss_of, share_of
from ports import unused_port

from msprobe.cli.main import cli

BY_NAME = {case.name: case for case in CASES}
QUICK = [
    "mlp.tp.control", "mlp.tp_sp.control", "mlp.fsdp2.control", "mlp.ddp.control",
    "mlp.ddp.desync", "mlp.tp.desync", "mlp.ddp.allreduce_missing", "mlp.ddp.averaged_twice",
    "mlp.fsdp2.reduce_bf16", "mlp.ddp.data", "mlp.tp.partial", "mlp.tp_sp.desync", "lm_dropout.tp.dropout_seed",
    "mlm.megatron.control",  # the declared layout's path through the bench (its faults: test_vocab_parallel.py)
]  # fmt: skip


# run with the quick subset (one process group for all), scored by their own tests
ALSO_RUN = ["mlm.megatron.wrong_dim"]


@pytest.fixture(scope="module")
def quick_runs(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("layouts")
    bench.run_cases([BY_NAME[name] for name in (*QUICK, *ALSO_RUN)], list(bench.MODES), root)
    return root


def test_the_quick_subset_meets_the_targets(quick_runs):
    """Every kind of fault of the bench, on the MLP, in statistics and tensor mode, beside five controls."""
    scores = [bench.score(BY_NAME[name], mode, quick_runs) for name in QUICK for mode in bench.MODES]
    lines, met = bench.table(scores)
    wrong = [f"{s.case.name} [{s.mode}]: {s.line}" for s in scores if not (s.module_right and s.api_right)]
    assert met and not wrong, "\n".join(lines + wrong)
    by_case = {(s.case.name, s.mode): s for s in scores}
    # the rank of a fault in one rank's own data: named from the tensors, not from their statistics
    assert by_case["mlp.ddp.data", "tensor"].ranks == (1,) and by_case["mlp.ddp.data", "statistics"].ranks is None
    # a replica out of step on rank 1 is named at rank 1 in both modes, by the golden run's value
    for mode in bench.MODES:
        assert by_case["mlp.ddp.desync", mode].ranks == (1,) and by_case["mlp.tp.desync", mode].ranks == (1,)


@pytest.mark.parametrize("layout", ["tp", "fsdp2", "ddp"])
def test_one_layout_against_one_process_passes_with_every_call_paired(quick_runs, layout, tmp_path):
    """What a user types: compare.json naming the sharded run's dump_path and the golden run's."""
    spec = tmp_path / "compare.json"
    run, golden = quick_runs / "runs" / f"mlp.{layout}.control.statistics", quick_runs / "golden" / "mlp.statistics"
    spec.write_text(json.dumps({"npu_path": str(run), "bench_path": str(golden)}))
    result = CliRunner().invoke(cli, ["compare", "-i", str(spec), "-o", str(tmp_path / "out")])
    assert result.exit_code == 0, result.output
    [line] = [line for line in result.output.splitlines() if line.startswith("step 0: ")]
    assert line.startswith("step 0: PASS") and " 0 unmatched" in line and "runs of other layouts" in line
    assert any(line.startswith("ranks merged: 2 ranks against 1: each step") for line in result.output.splitlines())
    merged = json.loads((tmp_path / "out" / "merged_npu" / "step0" / "rank" / "dump.json").read_text())
    golden_names = json.loads((golden / "step0" / "rank" / "dump.json").read_text())["data"].keys()
    assert list(merged["data"]) == list(golden_names)  # no framework call, no wrapper's name, in order


# merged statistics against numpy's statistics of the global tensors, gathered by hand


def _gathered(rank: int, world: int, layout: str, root: str, port: int) -> None:
    from msprobe.pytorch import PrecisionDebugger

    torch.set_num_threads(1)
    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=world)
    try:
        torch.manual_seed(0)
        model = MLP()
        inputs, targets = share_of("mlp", layout, *batch("mlp"), rank, world)
        laid_out = lay_out(model, layout, world)
        inner = laid_out.module if layout == "ddp" else laid_out
        seen = {}
        inner.fc1.register_forward_hook(lambda module, args, output: seen.update(output=output.detach().clone()))
        inner.fc2.register_forward_hook(lambda module, args, output: seen.update(fc2=output))
        config = Path(root) / f"{layout}.{rank}.json"
        config.write_text(json.dumps({"task": "statistics", "level": "mix", "dump_path": f"{root}/{layout}"}))
        debugger = PrecisionDebugger(config_path=str(config), model=laid_out)
        debugger.start()
        loss_of(laid_out(inputs), targets).backward()
        grad = inner.fc1.weight.grad
        grad = grad.full_tensor() if hasattr(grad, "full_tensor") else grad
        debugger.stop()
        debugger.step()
        pieces = [torch.empty_like(seen["output"]) for _ in range(world)]
        dist.all_gather(pieces, seen["output"].contiguous())
        output = torch.cat(pieces, dim=-1 if layout == "tp" else 0)
        if rank == 0:
            np.save(f"{root}/{layout}.fc1_output.npy", output.numpy())
            fc2 = seen["fc2"]  # tensor parallelism's all-reduced output: torch's asynchronous collective result
            np.save(f"{root}/{layout}.fc2_output.npy", (fc2.wait() if hasattr(fc2, "wait") else fc2).detach().numpy())
            Path(f"{root}/{layout}.fc2_type").write_text(f"{type(fc2).__name__} {fc2.requires_grad}")
            np.save(f"{root}/{layout}.fc1_weight_grad.npy", grad.numpy())
    finally:
        dist.destroy_process_group()


def _check(summary: dict, values: np.ndarray) -> None:
    """Each merged statistic is numpy's of the gathered tensor: the sums to float64's rounding of a merge, the
    extremes exactly, the mean and norm as the dump rounds them (to float32, for float32 data)."""
    wide = values.astype(np.float64)
    assert list(summary["shape"]) == list(values.shape)
    assert summary["Max"] == float(values.max()) and summary["Min"] == float(values.min())
    assert math.isclose(summary["Sum"], float(wide.sum()), rel_tol=1e-12, abs_tol=1e-12 * float(np.abs(wide).sum()))
    assert math.isclose(summary["SumSq"], float((wide * wide).sum()), rel_tol=1e-12)
    assert summary["Mean"] == float(np.float32(summary["Sum"] / wide.size))
    assert math.isclose(summary["Mean"], float(wide.mean()), rel_tol=1e-6, abs_tol=1e-7)
    assert math.isclose(summary["Norm"], float(np.sqrt((wide * wide).sum())), rel_tol=1e-6)


@pytest.mark.parametrize("layout", ["tp", "fsdp2", "ddp"])
def test_merged_statistics_are_numpy_s_of_the_global_tensor_gathered_by_hand(tmp_path, layout):
    from msprobe.core.dump.reader import read_dump
    from msprobe.core.parallel.merge import merge_ranks

    mp.spawn(_gathered, (2, layout, str(tmp_path), unused_port()), nprocs=2, join=True)
    dumps = {rank: read_dump(tmp_path / layout / "step0" / f"rank{rank}") for rank in (0, 1)}
    assert dumps[0].parallel["world_size"] == 2
    # every rank's weights say they are parameters (a replica the ranks must agree on), its outputs do not
    [entry] = [value for name, value in dumps[0].data.items() if re.search(r"\.fc1\.\w*Linear\.forward\.0$", name)]
    assert entry["parameters"]["weight"].get("parameter") is True and "parameter" not in entry["output"][0]
    assert ("shard" in entry["parameters"]["weight"]) is (layout in ("tp", "fsdp2"))
    # rank 0's own fc2 output, an asynchronous collective's result under tensor parallelism: its values, and
    # the requires_grad of the tensor the model returned
    kind, wanted = (tmp_path / f"{layout}.fc2_type").read_text().split()
    assert (kind == "AsyncCollectiveTensor") is (layout == "tp")
    [fc2] = [value for name, value in dumps[0].data.items() if re.search(r"\.fc2\.\w*Linear\.forward\.0$", name)]
    values = np.load(tmp_path / f"{layout}.fc2_output.npy")
    output = fc2["output"][0]
    assert output["Max"] == float(values.max()) and output["Min"] == float(values.min())
    assert math.isclose(output["Sum"], float(values.astype(np.float64).sum()), rel_tol=1e-9, abs_tol=1e-9)
    assert output["requires_grad"] is (wanted == "True") and list(output["shape"]) == list(values.shape)
    merged = merge_ranks(dumps).dump  # no other run to guide it: the layout the dumps record decides
    output = merged.data["Module.fc1.Linear.forward.0"]["output"][0]
    grad = merged.data["Module.fc1.Linear.parameters_grad"]["weight"][0]
    if layout == "tp":  # a plain tensor, each rank's columns: only another run's shape could place it
        assert output["merged"].startswith("the ranks differ")
    else:
        _check(output, np.load(tmp_path / f"{layout}.fc1_output.npy"))
    _check(grad, np.load(tmp_path / f"{layout}.fc1_weight_grad.npy"))
    guided = merge_ranks(dumps, lambda name, path: {"shape": [8, 8, 64]} if "fc1.Linear.forward" in name else None)
    _check(guided.dump.data["Module.fc1.Linear.forward.0"]["output"][0], np.load(tmp_path / f"{layout}.fc1_output.npy"))


# bad input: one clear line naming the entry and the rank, exit 2, nothing merged from some ranks only


def _cli(tmp_path: Path, npu: Path, bench_path: Path):
    spec = tmp_path / "compare.json"
    spec.write_text(json.dumps({"npu_path": str(npu), "bench_path": str(bench_path)}))
    return CliRunner().invoke(cli, ["compare", "-i", str(spec), "-o", str(tmp_path / "out")])


def test_a_missing_rank_is_one_clear_error(quick_runs, tmp_path):
    run = tmp_path / "run"
    shutil.copytree(quick_runs / "runs" / "mlp.tp.control.statistics", run)
    (run / "step0" / "rank1" / "dump.json").rename(tmp_path / "away.json")
    shutil.rmtree(run / "step0" / "rank1")
    shutil.copytree(run / "step0" / "rank0", run / "step0" / "rank3")  # two folders, but not the run's two ranks
    result = _cli(tmp_path, run, quick_runs / "golden" / "mlp.statistics")
    assert result.exit_code == 2 and "Traceback" not in result.output
    assert "missing: 1" in result.output and "nothing is merged from a partial set of ranks" in result.output


def test_shards_that_do_not_tile_their_global_shape_are_one_clear_error(quick_runs, tmp_path):
    run = tmp_path / "run"
    shutil.copytree(quick_runs / "runs" / "mlp.tp.control.statistics", run)
    dump_json = run / "step0" / "rank1" / "dump.json"
    dump = json.loads(dump_json.read_text())
    weight = dump["data"]["Functional.linear.0.forward"]["input_args"][1]
    weight["shape"] = [weight["shape"][0] + 3, weight["shape"][1]]
    dump_json.write_text(json.dumps(dump))
    result = _cli(tmp_path, run, quick_runs / "golden" / "mlp.statistics")
    assert result.exit_code == 2 and "Traceback" not in result.output
    line = result.output.strip().splitlines()[-1]
    assert "Functional.linear.0.forward input_args 1" in line and "do not tile the global shape" in line


@pytest.mark.parametrize("case", ["mlp.ddp.desync", "mlp.tp.control"])
def test_the_graph_page_across_layouts_gives_the_compare_s_answer(quick_runs, tmp_path, case):
    from msprobe.core.compare.run import compare_distributed
    from msprobe.core.graph.run import run_graph

    run, golden = quick_runs / "runs" / f"{case}.tensor", quick_runs / "golden" / "mlp.tensor"
    spec = tmp_path / "compare.json"
    spec.write_text(json.dumps({"npu_path": str(run), "bench_path": str(golden)}))
    [summary] = compare_distributed(run, golden, tmp_path / "compare")
    [graph] = run_graph(spec, tmp_path / "graph")
    assert graph.answer == summary.diagnosis.line() and graph.matched == graph.nodes
    page = next((tmp_path / "graph").glob("compare_*.html")).read_text()
    if summary.diagnosis.verdict == "divergence":
        assert "rank 1 alone" in graph.answer and summary.diagnosis.api in page


@pytest.mark.parametrize(("npu", "bench_run", "identical"), [("fsdp2", "ddp", True), ("tp", "ddp", False)])
def test_two_sharded_runs_of_other_layouts_compare_as_their_global_runs(
    quick_runs, tmp_path, npu, bench_run, identical
):
    """FSDP2 over 2 against DDP over 2: the same arithmetic, shard by shard (each rank's share of the batch, the
    averaged gradients, the optimizer's update of each shard), so the merged runs agree bit for bit. That holds
    only if a DTensor written in place (the optimizer's step on its shard, which moves no version counter of
    the shard) is measured again. TP against DDP: the data-parallel run merges alone first and guides the
    other."""
    from msprobe.core.compare.run import compare_distributed

    runs = quick_runs / "runs"
    [summary] = compare_distributed(
        runs / f"mlp.{npu}.control.statistics", runs / f"mlp.{bench_run}.control.statistics", tmp_path / "out"
    )
    assert summary.verdict == "PASS" and summary.unmatched == 0, summary.line()
    assert (summary.diagnosis.verdict == "none") == identical, summary.line()


def test_one_rank_of_a_run_of_two_is_refused_not_compared_as_the_run(quick_runs, tmp_path):
    run = tmp_path / "run"
    shutil.copytree(quick_runs / "runs" / "mlp.tp.control.statistics" / "step0" / "rank0", run / "step0" / "rank0")
    result = _cli(tmp_path, run, quick_runs / "golden" / "mlp.statistics")
    assert result.exit_code == 2 and "Traceback" not in result.output
    assert "holds 1 of the run's 2 ranks (rank0): nothing is merged from a partial set of ranks" in result.output


def test_in_statistics_a_wrong_cut_is_named_at_the_product_it_first_moves(quick_runs):
    """fc1's shard cut along each head's units: rows of the same weight in another order, the same statistics.
    The first call whose statistics move is fc2's row-parallel product, the one call computing otherwise from
    the same inputs: it cannot be its own measure of the layouts' rounding, or the answer drifts to a later
    gradient. (Tensor mode names fc1's weight: the bench's expectation, which statistics cannot meet.)"""
    found = bench.score(BY_NAME["mlm.megatron.wrong_dim"], "statistics", quick_runs)
    assert (found.module, found.api) == ("fc2", "Functional.linear.1.forward"), found.line
