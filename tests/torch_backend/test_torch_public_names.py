"""Every name msprobe.pytorch publishes resolves, to the object its deeper path holds (see tests/core/test_public_api.py
for the names the documentation imports)."""

import importlib

import msprobe.pytorch as published


def test_every_published_name_resolves_to_its_module_s_object():
    from msprobe.core.compare import run

    assert published.compare is run.compare and published.compare_distributed is run.compare_distributed
    for name in published.__all__:
        where = published._EXPORTS[name]
        module, attribute = where if isinstance(where, tuple) else (where, name)
        assert getattr(published, name) is getattr(importlib.import_module(module), attribute), name
    assert published.HuggingFaceDumpCallback is not published.LightningDumpCallback
