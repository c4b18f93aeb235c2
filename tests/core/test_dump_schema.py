"""The dump files' models describe real dumps of the reference tool, and the published schemas are current."""

import json

import pytest
from pydantic import ValidationError
from repo_paths import REFERENCE_DUMPS, REPO_ROOT

from msprobe.core.dump.schema import ConstructFile, DumpFile, StackFile, json_schemas

FOLDERS = sorted(path.parent for path in REFERENCE_DUMPS.rglob("dump.json"))


@pytest.mark.parametrize("folder", FOLDERS, ids=[str(f.relative_to(REFERENCE_DUMPS)) for f in FOLDERS])
def test_the_reference_tool_s_dumps_fit_the_models(folder):
    dump = DumpFile.model_validate(json.loads((folder / "dump.json").read_text()))
    assert dump.data and dump.task in ("statistics", "tensor")
    StackFile.model_validate(json.loads((folder / "stack.json").read_text()))
    ConstructFile.model_validate(json.loads((folder / "construct.json").read_text()))


def test_a_26x_grouped_stack_file_fits():
    StackFile.model_validate({"0": [["Torch.add.0.forward", "Torch.add.1.forward"], ["File a.py, line 1, in f"]]})


@pytest.mark.parametrize(
    "broken",
    [
        {"data": {}},  # no task
        {"task": "statistics", "data": {"Torch.add.0.forward": {"output": [{"type": "torch.Tensor", "shape": [2]}]}}},
        {"task": "statistics", "data": {"Torch.add.0.forward": {"input_args": "not a list"}}},
    ],
)
def test_what_breaks_the_format_is_refused(broken):
    with pytest.raises(ValidationError):
        DumpFile.model_validate(broken)


def test_the_published_schemas_are_made_from_the_models():
    """docs/reference/schemas: regenerate with `python -m msprobe.core.dump.schema docs/reference/schemas`."""
    folder = REPO_ROOT / "docs" / "reference" / "schemas"
    for file_name, schema in json_schemas().items():
        assert json.loads((folder / file_name).read_text()) == schema, file_name
