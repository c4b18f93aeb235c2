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


@pytest.fixture
def free_port() -> str:
    """A TCP port no one listens on now, for a torchrun rendezvous: tests run in parallel workers, so a fixed
    port could be taken by another test's run."""
    from ports import unused_port

    return str(unused_port())
