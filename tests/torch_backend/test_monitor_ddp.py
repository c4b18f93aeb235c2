"""Weight gradients before and after data-parallel reduction, on two CPU ranks (gloo)."""

import json
import os

import pytest
import torch
import torch.distributed as dist
import torch.multiprocessing as mp
from result_tables import check_rank_gradients, csv_rows


def join_group(rank: int, folder: str) -> None:
    """A rendezvous through a file in the test's folder: no port to find free (and lose to another process)."""
    dist.init_process_group("gloo", init_method=f"file://{folder}/rendezvous", rank=rank, world_size=2)


def train_one_rank(rank: int, folder: str) -> None:
    from msprobe.pytorch import TrainerMon

    os.environ.update(MONITOR_OUTPUT_DIR=f"{folder}/out")
    join_group(rank, folder)
    torch.manual_seed(0)
    plain = torch.nn.Linear(8, 2)
    model = torch.nn.parallel.DistributedDataParallel(torch.nn.Linear(8, 2))
    model.module.load_state_dict(plain.state_dict())
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    monitor = TrainerMon(f"{folder}/m.json", params_have_main_grad=False)
    monitor.set_monitor(model, grad_acc_steps=2, optimizer=optimizer)
    generator = torch.Generator().manual_seed(10 + rank)  # each rank its own data
    for _ in range(2):  # two micro-batches per step
        x = torch.randn(4, 8, generator=generator)
        plain(x).pow(2).sum().backward()
        model(x).pow(2).sum().backward()
    optimizer.step()
    monitor.finish()
    expected = {"local": plain.weight.grad.norm().item(), "reduced": model.module.weight.grad.norm().item()}
    with open(f"{folder}/expected{rank}.json", "w") as handle:
        json.dump(expected, handle)
    dist.barrier()  # both ranks done before the group goes away
    dist.destroy_process_group()


def test_unreduced_is_the_local_gradient_and_reduced_the_average(tmp_path):
    (tmp_path / "m.json").write_text(json.dumps({"wg_distribution": True, "ops": ["norm"]}))
    mp.spawn(train_one_rank, args=(str(tmp_path),), nprocs=2, join=True)
    check_rank_gradients(tmp_path, "module.weight")


def train_with_groups(rank: int, folder: str, groups: str) -> None:
    from msprobe.pytorch import TrainerMon

    os.environ.update(MONITOR_OUTPUT_DIR=f"{folder}/{groups}")
    join_group(rank, folder)
    torch.manual_seed(0)
    model = torch.nn.parallel.DistributedDataParallel(torch.nn.Linear(8, 2))
    model.module.weight.tensor_model_parallel = True  # split across tensor-parallel ranks: each keeps its own
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    monitor = TrainerMon(f"{folder}/m.json", params_have_main_grad=False)
    world = dist.group.WORLD
    monitor.set_monitor(
        model,
        optimizer=optimizer,
        dp_group=world if groups == "dp" else None,
        tp_group=world if groups == "tp" else None,
    )
    model(torch.randn(4, 8)).sum().backward()
    optimizer.step()
    monitor.finish()
    dist.barrier()
    dist.destroy_process_group()


@pytest.mark.parametrize(
    ("groups", "kept"),
    [
        ("dp", {0: {"module.weight", "module.bias"}, 1: set()}),  # one copy per data-parallel group
        ("tp", {0: {"module.weight", "module.bias"}, 1: {"module.weight"}}),  # replicated bias on the first only
    ],
)
def test_groups_keep_one_copy_of_reduced_gradients(tmp_path, groups, kept):
    (tmp_path / "m.json").write_text(json.dumps({"wg_distribution": True, "ops": ["norm"]}))
    mp.spawn(train_with_groups, args=(str(tmp_path), groups), nprocs=2, join=True)
    for rank, names in kept.items():
        (folder,) = list((tmp_path / groups).glob(f"*-rank{rank}"))
        assert {r["name"] for r in csv_rows(folder / "grad_reduced_0-0.csv")} == names
        assert {r["name"] for r in csv_rows(folder / "grad_unreduced_0-0.csv")} == {"module.weight", "module.bias"}
