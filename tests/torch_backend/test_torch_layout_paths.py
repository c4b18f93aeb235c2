"""The paths scripts import msprobe-torch's moved modules by are those very modules, so a patch or an
``isinstance`` through either path sees the other."""

import importlib

import pytest

MOVED = {
    "msprobe.pytorch.compile_check": "msprobe.pytorch.compile.check",
    "msprobe.pytorch.run_ut": "msprobe.pytorch.precheck.run_ut",
    "msprobe.pytorch.online_dispatch": "msprobe.pytorch.precheck.online_dispatch",
    "msprobe.pytorch.huggingface": "msprobe.pytorch.integrations.huggingface",
    "msprobe.pytorch.lightning": "msprobe.pytorch.integrations.lightning",
}


@pytest.mark.parametrize(("old", "new"), MOVED.items())
def test_the_old_path_is_the_module_itself(old, new):
    assert importlib.import_module(old) is importlib.import_module(new)


def test_mindstudio_probes_online_dispatch_import_works():
    from msprobe.pytorch.online_dispatch import PtdbgDispatch
    from msprobe.pytorch.precheck.online_dispatch import PtdbgDispatch as moved

    assert PtdbgDispatch is moved
