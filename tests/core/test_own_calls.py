"""A declared layout's own calls (``"calls": "own"``) left out, and the later calls' counts closed up: names
written out by hand."""

from __future__ import annotations

from pathlib import Path

from msprobe.core.dump.reader import Dump
from msprobe.core.parallel.own_calls import own_patterns, without_own_calls

EMBED = "Module.embed.VPE.forward.0"


def _dump() -> Dump:
    names = [
        "Tensor.__sub__.0.forward",  # inside embed
        "Functional.embedding.0.forward",  # inside embed
        EMBED,
        "Tensor.__sub__.1.forward",  # after it: becomes the first subtraction
        "Functional.linear.0.forward",
        "Tensor.__sub__.1.backward",
        "Functional.embedding.0.backward",  # a backward has no parent; its forward was inside
        "Tensor.__sub__.0.backward",
    ]
    construct = {name: None for name in names}
    construct.update({"Tensor.__sub__.0.forward": EMBED, "Functional.embedding.0.forward": EMBED})
    stack = {"Tensor.__sub__.1.forward": ["frame"]}
    return Dump(Path("x"), "statistics", "mix", "pytorch", {name: {} for name in names}, None, stack, construct)


def test_the_calls_inside_are_left_out_and_the_counts_close_up():
    dump = without_own_calls(_dump(), ["embed"])
    assert list(dump.data) == [EMBED, "Tensor.__sub__.0.forward", "Functional.linear.0.forward",
                               "Tensor.__sub__.0.backward"]  # fmt: skip
    assert dump.stack == {"Tensor.__sub__.0.forward": ["frame"]}
    assert EMBED in dump.construct and "Functional.embedding.0.forward" not in dump.construct


def test_under_ddp_the_wrapper_path_matches_too():
    dump = _dump()
    dump.construct = {name: parent.replace("Module.embed", "Module.module.embed") if parent else parent
                      for name, parent in dump.construct.items()}  # fmt: skip
    assert "Functional.embedding.0.forward" not in without_own_calls(dump, ["embed"]).data


def test_nothing_declared_leaves_the_dump_as_it_is():
    dump = _dump()
    assert without_own_calls(dump, []) is dump
    assert without_own_calls(dump, ["head"]) is dump


def test_the_patterns_come_from_the_headers_and_malformed_ones_are_passed_over():
    headers = [
        {"tensor_parallel": {"modules": {"embed": {"weight": 0, "calls": "own"}, "fc2": {"calls": "partial"}}}},
        {"tensor_parallel": {"modules": "not a mapping"}},
        {"tensor_parallel": {"modules": {"*.lookup": {"calls": "own"}, "embed": {"calls": "own"}}}},
        None,
    ]
    assert own_patterns(headers) == ["embed", "*.lookup"]
