"""One training step of a small MLP, dumped, in one process or sharded over several: the example of
docs/parallel.md.

    python train.py single ./dump_golden                       # the golden run: one process, the whole batch
    torchrun --nproc_per_node 2 train.py tp ./dump_tp          # tensor parallel (DTensor)
    torchrun --nproc_per_node 2 train.py fsdp2 ./dump_fsdp2    # FSDP2: each rank its share of the batch
    torchrun --nproc_per_node 2 train.py ddp ./dump_ddp        # DDP: each rank its share of the batch

Add ``--desync`` to a data-parallel run to nudge rank 1's copy of fc2's weight: a replica out of step.
"""

from __future__ import annotations

import argparse

import torch
import torch.distributed as dist
import torch.nn.functional as F
from torch import nn

from msprobe.pytorch import PrecisionDebugger, seed_all


class MLP(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.norm = nn.LayerNorm(16)
        self.fc1 = nn.Linear(16, 64)
        self.act = nn.GELU()
        self.fc2 = nn.Linear(64, 16)
        self.head = nn.Linear(16, 8)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.head(self.fc2(self.act(self.fc1(self.norm(x)))))


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("layout", choices=["single", "tp", "fsdp2", "ddp"])
    parser.add_argument("dump_path")
    parser.add_argument("--desync", action="store_true")
    options = parser.parse_args()
    seed_all(0)
    model = MLP()
    generator = torch.Generator().manual_seed(7)
    inputs, targets = torch.randn(8, 8, 16, generator=generator), torch.randint(0, 8, (8, 8), generator=generator)
    if options.layout != "single":
        dist.init_process_group("gloo")
        from torch.distributed.device_mesh import init_device_mesh

        rank, world = dist.get_rank(), dist.get_world_size()
        mesh = init_device_mesh("cpu", (world,))
        if options.layout == "tp":
            from torch.distributed.tensor.parallel import ColwiseParallel, RowwiseParallel, parallelize_module

            model = parallelize_module(model, mesh, {"fc1": ColwiseParallel(), "fc2": RowwiseParallel()})
        else:  # data parallel: each rank its share of the batch
            inputs, targets = inputs.chunk(world)[rank], targets.chunk(world)[rank]
            if options.layout == "fsdp2":
                from torch.distributed.fsdp import fully_shard

                for layer in (model.fc1, model.fc2, model.head):
                    fully_shard(layer, mesh=mesh)
                model = fully_shard(model, mesh=mesh)
            else:
                model = nn.parallel.DistributedDataParallel(model)
                if options.desync and rank == 1:
                    with torch.no_grad():
                        model.module.fc2.weight.mul_(1.05)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    debugger = PrecisionDebugger(task="statistics", level="mix", dump_path=options.dump_path)
    debugger.start(model)
    loss = F.cross_entropy(model(inputs).reshape(-1, 8), targets.reshape(-1))
    loss.backward()
    optimizer.step()
    debugger.stop()
    debugger.step()
    if dist.is_initialized():
        dist.destroy_process_group()


if __name__ == "__main__":
    main()
