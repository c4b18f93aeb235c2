"""The entry-name grammar against every name in the reference tool's own dumps, and each form by hand."""

from __future__ import annotations

import json

import pytest
from repo_paths import REFERENCE_DUMPS

from msprobe.core.dump.entry_names import kind_of, module_path, parse_entry, parse_item


def _reference_names() -> list[str]:
    names: set[str] = set()
    for path in REFERENCE_DUMPS.rglob("dump.json"):
        names.update(json.loads(path.read_text())["data"])
    return sorted(names)


REFERENCE_NAMES = _reference_names()


def test_the_reference_dumps_hold_every_form():
    parsed = [parse_entry(name) for name in REFERENCE_NAMES]
    assert len(REFERENCE_NAMES) >= 20
    assert any(p and not p.is_module for p in parsed)
    assert any(p and p.is_module and p.direction for p in parsed)
    assert any(p and p.is_parameters_grad for p in parsed)


@pytest.mark.parametrize("name", REFERENCE_NAMES)
def test_every_name_the_reference_wrote_parses_and_is_written_back_alike(name):
    parsed = parse_entry(name)
    assert parsed is not None
    assert parsed.format() == name
    # what a reader takes apart by hand: the last parts are count and direction, or direction and count
    parts = name.split(".")
    if parts[-1] == "parameters_grad":
        assert (parsed.path, parsed.cls, parsed.direction) == (".".join(parts[1:-2]), parts[-2], "")
    elif parts[0] == "Module":
        assert (parsed.direction, parsed.count, parsed.cls) == (parts[-2], int(parts[-1]), parts[-3])
    else:
        assert (parsed.direction, parsed.count, parsed.kind) == (parts[-1], int(parts[-2]), ".".join(parts[:-2]))


@pytest.mark.parametrize(
    "name, prefix, kind, direction, count, path, cls",
    [
        ("Functional.linear.3.forward", "Functional", "Functional.linear", "forward", 3, None, None),
        ("Tensor.__add__.0.backward", "Tensor", "Tensor.__add__", "backward", 0, None, None),
        ("Distributed.all_reduce.12.forward", "Distributed", "Distributed.all_reduce", "forward", 12, None, None),
        ("Aten.mm.default.0.forward", "Aten", "Aten.mm.default", "forward", 0, None, None),
        ("Mint.nn.functional.relu.1.forward", "Mint", "Mint.nn.functional.relu", "forward", 1, None, None),
        ("Module.layers.0.mlp.MLP.forward.2", "Module", "Module.layers.0.mlp.MLP", "forward", 2, "layers.0.mlp", "MLP"),
        ("Cell.net.fc.Dense.backward.0", "Cell", "Cell.net.fc.Dense", "backward", 0, "net.fc", "Dense"),
        ("Module.conv.Conv2d.parameters_grad", "Module", "Module.conv.Conv2d", "", None, "conv", "Conv2d"),
    ],
)
def test_each_form_by_hand(name, prefix, kind, direction, count, path, cls):
    parsed = parse_entry(name)
    assert parsed is not None
    assert (parsed.prefix, parsed.kind, parsed.direction, parsed.count, parsed.path, parsed.cls) == (
        prefix, kind, direction, count, path, cls,
    )  # fmt: skip
    assert parsed.format() == name and module_path(name) == path and kind_of(name) == kind


@pytest.mark.parametrize("name", ["", "loss", "Functional.linear.forward", "Module.fc.Linear.forward", "x.1.sideways"])
def test_names_of_no_known_form_are_none(name):
    assert parse_entry(name) is None and module_path(name) is None and kind_of(name) == name


def test_the_derived_names():
    module = parse_entry("Module.fc.Linear.backward.4")
    api = parse_entry("Functional.linear.4.backward")
    assert module is not None and api is not None
    assert module.without_count() == "Module.fc.Linear.backward" and api.without_count() == "Functional.linear.backward"
    assert module.without_class() == "Module.fc.backward.4" and api.without_class() == "Functional.linear.4.backward"


def test_a_data_item_name():
    item = parse_item("Functional.linear.0.forward.input.1.2")
    assert item is not None and (item.entry, item.side, item.index, item.rest) == (
        "Functional.linear.0.forward", "input", 1, ".2",
    )  # fmt: skip
    assert item.format() == "Functional.linear.0.forward.input.1.2"
    assert parse_item("Functional.linear.0.forward") is None
