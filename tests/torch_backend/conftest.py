import pytest


@pytest.fixture(autouse=True)
def _real_dropout():
    """seed_all(rm_dropout=True) patches dropout for the process; each test starts without it."""
    from msprobe.pytorch.seed import restore_dropout

    restore_dropout()
    yield
    restore_dropout()
