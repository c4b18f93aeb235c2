"""Every name msprobe.mindspore publishes resolves (see tests/core/test_public_api.py for the names the
documentation imports)."""

import importlib

import msprobe.mindspore as published


def test_every_published_name_resolves_to_its_module_s_object():
    from msprobe.core.compare import run

    assert published.compare is run.compare and published.compare_distributed is run.compare_distributed
    for name in published.__all__:
        assert getattr(published, name) is getattr(importlib.import_module(published._EXPORTS[name]), name), name
