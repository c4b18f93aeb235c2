"""A TCP port for a test's own rendezvous or receiver, and a gloo process group on it."""

import contextlib
import socket
from collections.abc import Iterator


def unused_port() -> int:
    """A port no one listens on now: tests run in parallel workers, so a fixed one could be taken."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


@contextlib.contextmanager
def gloo_group(rank: int, world: int, port: int) -> Iterator[None]:
    """This spawned process as ``rank`` of a gloo group of ``world`` on ``port``, one thread each (the test
    machine has few cores), destroyed however the body ends."""
    import torch
    import torch.distributed as dist

    torch.set_num_threads(1)
    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=world)
    try:
        yield
    finally:
        dist.destroy_process_group()
