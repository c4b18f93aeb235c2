"""FSDP2 (``fully_shard``) and DDP training under every task and summary mode, on two CPU ranks over gloo.

The tool must never break the user's training: FSDP2 frees each gathered parameter after use by resizing its
storage to nothing, which fails if anything the dump did marked that storage as fixed in size (numpy does, for
memory it views). Each configuration trains two steps beside an undumped twin of the same seed and batches; the
losses and the final weights must be the twin's, bit for bit, and each dump must hold what its task writes.
"""

from __future__ import annotations

import json
from pathlib import Path

import torch
import torch.distributed as dist
import torch.multiprocessing as mp

CONFIGS = {  # name -> config fields besides dump_path
    "statistics": {"task": "statistics", "level": "mix", "statistics": {"summary_mode": "statistics"}},
    "md5": {"task": "statistics", "level": "mix", "statistics": {"summary_mode": "md5"}},
    "md5_L0": {"task": "statistics", "level": "L0", "statistics": {"summary_mode": "md5"}},
    "md5_L1": {"task": "statistics", "level": "L1", "statistics": {"summary_mode": "md5"}},
    "xor": {"task": "statistics", "level": "mix", "statistics": {"summary_mode": "xor"}},
    "tensor": {"task": "tensor", "level": "mix"},
    "tensor_md5": {"task": "tensor", "level": "L1", "tensor": {"summary_mode": "md5"}},
    "structure": {"task": "structure", "level": "mix"},
    "overflow_check": {"task": "overflow_check", "level": "L1"},
    "nan_check": {"task": "nan_check", "level": "L1"},
    "flight_recorder": {"task": "flight_recorder", "level": "L1"},
    "free_benchmark": {"task": "free_benchmark", "level": "L1"},
    "grad_probe": {"task": "grad_probe", "grad_probe": {"grad_level": "L0"}},
}


def _model(layout: str) -> torch.nn.Module:
    from torch.distributed.fsdp import fully_shard

    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.ReLU(), torch.nn.Linear(32, 8))
    if layout == "ddp":
        return torch.nn.parallel.DistributedDataParallel(model)
    for layer in (model[0], model[2]):
        fully_shard(layer)
    fully_shard(model)
    return model


def _train(rank: int, debugger=None, layout: str = "fsdp2") -> tuple[list[float], list[torch.Tensor]]:
    model = _model(layout)
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-2)
    probing = debugger is not None and debugger.config.task == "grad_probe"
    if probing:
        debugger.grad_probe(model)  # its own step: each optimizer call
    losses = []
    for step in range(2):
        if debugger is not None and not probing:
            debugger.start(model)
        x = torch.randn(4, 16, generator=torch.Generator().manual_seed(10 * step + rank))
        loss = model(x).square().mean()
        loss.backward()
        optimizer.step()
        optimizer.zero_grad()
        losses.append(loss.item())
        if debugger is not None and not probing:
            debugger.stop()
            debugger.step()
    weights = [(p.to_local() if hasattr(p, "to_local") else p).detach().clone() for p in model.parameters()]
    return losses, weights


def _each_rank(rank: int, folder: str, layout: str = "fsdp2") -> None:
    from msprobe.pytorch import PrecisionDebugger

    dist.init_process_group("gloo", init_method=f"file://{folder}/rendezvous", rank=rank, world_size=2)
    plain_losses, plain_weights = _train(rank, layout=layout)
    outcome = {}
    for name, fields in CONFIGS.items():
        config = Path(folder) / f"{name}.{rank}.json"
        config.write_text(json.dumps({**fields, "dump_path": f"{folder}/{name}"}))
        try:
            losses, weights = _train(rank, PrecisionDebugger(config_path=str(config)), layout)
            same = losses == plain_losses and all(torch.equal(a, b) for a, b in zip(weights, plain_weights))
            outcome[name] = "trained alike" if same else f"trained otherwise: {losses} vs {plain_losses}"
        except Exception as exc:  # reported by the test, with the configuration's name
            outcome[name] = f"{type(exc).__name__}: {exc}"
        dist.barrier()
    (Path(folder) / f"outcome{rank}.json").write_text(json.dumps(outcome))
    dist.destroy_process_group()


def test_fsdp2_trains_alike_under_every_task_and_summary_mode(tmp_path):
    mp.spawn(_each_rank, args=(str(tmp_path),), nprocs=2, join=True)
    _assert_trained_alike_and_dumped(tmp_path)
    assert list((tmp_path / "tensor" / "step1" / "rank0" / "dump_tensor_data").glob("*.pt"))
    grad_files = list((tmp_path / "grad_probe").rglob("grad_summary_*.csv"))
    assert len(grad_files) >= 2


def test_ddp_trains_alike_under_every_task_and_summary_mode(tmp_path):
    """The same configurations on a DDP model, whose gradients are all-reduced in buckets the hooks read."""
    mp.spawn(_each_rank, args=(str(tmp_path), "ddp"), nprocs=2, join=True)
    _assert_trained_alike_and_dumped(tmp_path)


def _assert_trained_alike_and_dumped(tmp_path: Path) -> None:
    for rank in (0, 1):
        outcome = json.loads((tmp_path / f"outcome{rank}.json").read_text())
        assert outcome == dict.fromkeys(CONFIGS, "trained alike"), outcome
    # what each dump holds: a CRC-32 (8 hex digits) or an XOR (16) beside each tensor in md5 and xor mode
    for name, digits in (("md5", 8), ("md5_L0", 8), ("md5_L1", 8), ("xor", 16)):
        data = json.loads((tmp_path / name / "step0" / "rank1" / "dump.json").read_text())["data"]
        checksums = [value["md5"] for entry in data.values() for value in _tensors(entry)]
        assert checksums and all(len(c) == digits and int(c, 16) >= 0 for c in checksums), name


def _tensors(value):
    if isinstance(value, dict):
        if value.get("type") == "torch.Tensor":
            yield value
        else:
            for item in value.values():
                yield from _tensors(item)
    elif isinstance(value, list):
        for item in value:
            yield from _tensors(item)


def test_the_bytes_read_in_place_leave_the_storage_resizable():
    """What the md5 path reads of a tensor must not pin its storage: FSDP2 resizes it to 0 to free it."""
    import zlib

    from msprobe.pytorch.dump.measuring import crc32_hex, xor_checksum_hex
    from msprobe.pytorch.tensor_io import tensor_to_numpy

    for read in (crc32_hex, xor_checksum_hex, tensor_to_numpy):
        tensor = torch.arange(12, dtype=torch.float32)
        expected = f"{zlib.crc32(tensor.numpy().copy().tobytes()):08x}"
        tensor = torch.arange(12, dtype=torch.float32)  # a fresh storage: .numpy() above pinned the other
        value = read(tensor)
        if read is crc32_hex:
            assert value == expected
        tensor.untyped_storage().resize_(0)  # raised "Trying to resize storage that is not resizable"
        assert tensor.untyped_storage().nbytes() == 0
    # a storage already freed is refused in words, never read (it was read out of bounds)
    freed = torch.ones(8)
    freed.untyped_storage().resize_(0)
    try:
        crc32_hex(freed)
    except RuntimeError as exc:
        assert "cannot be read in place" in str(exc)
    else:
        raise AssertionError("a freed storage was read")
