"""The files of a dump folder as pydantic models, and the JSON Schemas made from them.

dump.json, stack.json and construct.json are the interface users and other
tools already know (mindstudio-probe writes and reads the same files): these
models say what they hold, for the documentation
(``python -m msprobe.core.dump.schema DIR`` writes the schemas) and for tests
that check real dumps of both tools against them. Fields the reference tool's
newer releases add are allowed.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any, Union

from pydantic import BaseModel, ConfigDict, Field, RootModel, TypeAdapter, model_validator
from typing_extensions import TypeAliasType

from msprobe.core.files import write_new_file

Number = Union[float, int, bool, str, None]  # noqa: UP007 - the schema's own spelling of the alternatives


class TensorSummary(BaseModel):
    """One tensor: its kind, dtype and shape, its statistics, and where its file is (task ``tensor``)."""

    model_config = ConfigDict(extra="allow")

    type: str = Field(description="The framework's tensor class: torch.Tensor, mindspore.Tensor, ...")
    dtype: str = Field(description="The framework's dtype text: torch.float32, Float32, ...")
    shape: list[int] = Field(description="Sizes; [] for a 0-d tensor")
    Max: Number = Field(default=None, description="Largest value; Infinity, -Infinity or NaN as JSON tokens")
    Min: Number = Field(default=None, description="Smallest value")
    Mean: Number = Field(default=None, description="Mean of the values")
    Norm: Number = Field(default=None, description="L2 norm of the values")
    requires_grad: bool | None = Field(default=None, description="PyTorch: whether the tensor requires a gradient")
    md5: str | None = Field(default=None, description="Task statistics with summary_mode md5: CRC-32, 8 hex digits")
    data_name: str | None = Field(default=None, description="Task tensor: the file in dump_tensor_data")


class PlainValue(BaseModel):
    """A value that is not a tensor: a number, a string, a bool, a dtype, a slice, a memory format (its
    ``format``), ... A value with a shape is a tensor, and must be a whole TensorSummary."""

    model_config = ConfigDict(extra="allow")

    type: str = Field(description="Its Python type: int, float, bool, str, slice, torch.dtype, ...")
    value: Any = Field(default=None, description="The value itself")

    @model_validator(mode="before")
    @classmethod
    def _no_tensor(cls, data: Any) -> Any:
        if isinstance(data, dict) and "shape" in data:
            raise ValueError("a value with a shape is a tensor: it needs dtype and shape")
        return data


# a named recursive type: a value may be a list or dict of values
Value = TypeAliasType(
    "Value",
    Union[TensorSummary, PlainValue, list["Value"], dict[str, "Value"], None],  # noqa: UP007
)


class Entry(BaseModel):
    """One call (``Functional.relu.0.forward``, ``Module.fc.Linear.backward.0``) or one module's parameter
    gradients (``Module.fc.Linear.parameters_grad``: parameter name -> [summary])."""

    model_config = ConfigDict(extra="allow")

    input_args: list[Value] | None = Field(default=None, description="Forward: the positional arguments")
    input_kwargs: dict[str, Value] | None = Field(default=None, description="Forward: the keyword arguments")
    output: Value = Field(default=None, description="Forward: the result; backward: the gradients passed on")
    input: list[Value] | None = Field(default=None, description="Backward: the gradients arriving at the output")
    parameters: dict[str, Value] | None = Field(default=None, description="Module forward: its own parameters")
    is_recompute: bool | None = Field(default=None, description="Made again during backward (checkpointing)")


class DumpFile(BaseModel):
    """dump.json of one step and rank."""

    model_config = ConfigDict(extra="allow")

    task: str = Field(description="statistics, tensor, structure, overflow_check, ...")
    level: str | None = Field(default=None, description="L0, L1, mix, L2, debug")
    framework: str | None = Field(default=None, description="pytorch or mindspore")
    dump_data_dir: str | None = Field(default=None, description="Task tensor: the folder of the tensor files")
    data: dict[str, Entry | dict[str, list[Value]]] = Field(description="Entry name -> entry, in call order")


class StackFile(RootModel[dict[str, Union[list[str], list[list[str]]]]]):  # noqa: UP007
    """stack.json: entry name -> the call's stack frames as text, outermost first. mindstudio-probe 26.x groups
    the names that share a stack: ``{"0": [[name, ...], [frame, ...]]}``."""


class ConstructFile(RootModel[dict[str, Union[str, None]]]):  # noqa: UP007
    """construct.json: entry name -> the module call it was made in (its parent), ``null`` at the root."""


SCHEMAS = {
    "dump.schema.json": DumpFile,
    "stack.schema.json": StackFile,
    "construct.schema.json": ConstructFile,
}


def json_schemas() -> dict[str, dict[str, Any]]:
    """File name -> JSON Schema, for each file of a dump folder."""
    schemas = {}
    for file_name, model in SCHEMAS.items():
        schema = TypeAdapter(model).json_schema()
        schema["$schema"] = "https://json-schema.org/draft/2020-12/schema"
        schema["title"] = file_name.replace(".schema", "")
        schemas[file_name] = schema
    return schemas


def write_schemas(folder: Path) -> list[Path]:
    written = []
    for file_name, schema in json_schemas().items():
        text = (json.dumps(schema, indent=2, ensure_ascii=False) + "\n").encode("utf-8")
        written.append(write_new_file(folder / file_name, lambda handle, text=text: handle.write(text)))
    return written


if __name__ == "__main__":  # pragma: no cover - a maintainer's command
    for path in write_schemas(Path(sys.argv[1] if len(sys.argv) > 1 else "docs/reference/schemas")):
        print(path)
