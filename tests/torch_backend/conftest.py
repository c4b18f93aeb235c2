import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))  # models, summaries, split_runners: this folder's helpers


@pytest.fixture(autouse=True)
def _real_dropout():
    """seed_all(rm_dropout=True) patches dropout for the process; each test starts without it."""
    from msprobe.pytorch.seed import restore_dropout

    restore_dropout()
    yield
    restore_dropout()


@pytest.fixture(autouse=True)
def _no_grad_probe_left():
    """A grad probe's optimizer hook is global and stays for the process (as a debugger does in training):
    each test ends with none left on, so a later test's optimizer steps run no earlier test's probe."""
    yield
    from torch.optim import optimizer

    for hook in list(optimizer._global_optimizer_pre_hooks.values()):
        probe = getattr(hook, "__self__", None)
        if type(probe).__name__ == "GradProbe":
            probe.remove()


@pytest.fixture
def free_port() -> str:
    """A TCP port no one listens on now, for a torchrun rendezvous: tests run in parallel workers, so a fixed
    port could be taken by another test's run."""
    from ports import unused_port

    return str(unused_port())
