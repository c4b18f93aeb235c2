"""Translating NPU-side names into bench-side names before matching.

Same framework: only ``-dm`` (exact data names) applies. MindSpore against
PyTorch: cells become modules (``Cell.fc.Dense`` -> ``Module.fc.Dense``), the
default API table (``Functional.abs`` -> ``Torch.abs``) applies, and
``-am``/``-cm``/``-lm`` files refine it. Files are the reference's YAML
formats; a bad file is one error naming it.
"""

from __future__ import annotations

import importlib.resources
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import yaml

from msprobe.core.dump.entry_names import parse_item
from msprobe.core.errors import DataFileError
from msprobe.core.files import plain_yaml


def read_yaml(path: str | Path, what: str) -> Any:
    """A mapping or config YAML, safely loaded; ``what`` names it in the one-line error a bad file gets."""
    file = Path(path)
    try:
        return plain_yaml(file.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise DataFileError(file, f"{what} file not found") from None
    except RecursionError:
        raise DataFileError(file, f"the {what} file is nested too deeply") from None
    except yaml.YAMLError as exc:
        problem = getattr(exc, "problem", None) or exc.__class__.__name__
        raise DataFileError(file, f"invalid YAML in the {what} file ({problem})") from None


def default_api_mapping() -> dict[str, str]:
    text = importlib.resources.files("msprobe.core.data").joinpath("ms_to_pt_api.yaml").read_text()
    return dict(yaml.safe_load(text))


@dataclass
class ApiRule:
    pt_api: str
    args: dict[int, int] = field(default_factory=dict)
    outputs: dict[int, int] = field(default_factory=dict)


def read_api_mapping(path: str | Path) -> dict[str, ApiRule]:
    raw = read_yaml(path, "api_mapping")
    items = raw if isinstance(raw, list) else [raw]
    rules: dict[str, ApiRule] = {}
    for number, item in enumerate(items):
        if not isinstance(item, dict) or "ms_api" not in item or "pt_api" not in item:
            raise DataFileError(path, f"item {number}: needs ms_api and pt_api")
        ms_args, pt_args = item.get("ms_args") or [], item.get("pt_args") or []
        ms_outs, pt_outs = item.get("ms_outputs") or [], item.get("pt_outputs") or []
        if len(ms_args) != len(pt_args) or len(ms_outs) != len(pt_outs):
            raise DataFileError(path, f"item {number}: ms_args/pt_args and ms_outputs/pt_outputs must pair up")
        rules[str(item["ms_api"])] = ApiRule(
            str(item["pt_api"]),
            dict(zip(map(int, ms_args), map(int, pt_args))),
            dict(zip(map(int, ms_outs), map(int, pt_outs))),
        )
    return rules


def read_flat_mapping(path: str | Path, what: str) -> dict[str, str]:
    raw = read_yaml(path, what)
    if raw is None:
        return {}
    if not isinstance(raw, dict):
        raise DataFileError(path, f"the {what} file must map names to names")
    return {str(key): str(value) for key, value in raw.items()}


def read_layer_mapping(path: str | Path) -> dict[str, str]:
    """Layer renames, flattened to path-segment renames (the layer class is not needed to apply them)."""
    raw = read_yaml(path, "layer_mapping")
    if not isinstance(raw, dict):
        raise DataFileError(path, "the layer_mapping file must map layer names to {ms_name: pt_name}")
    renames: dict[str, str] = {}
    for layer, pairs in raw.items():
        if not isinstance(pairs, dict):
            raise DataFileError(path, f"layer {layer}: expected 'ms_name: pt_name' pairs")
        renames.update({str(k): str(v) for k, v in pairs.items()})
    return renames


class NameMapper:
    """Callable: an NPU-side row (or entry) name -> the bench-side name to look for."""

    def __init__(
        self,
        cross_framework: bool = False,
        api_mapping: str | Path | None = None,
        cell_mapping: str | Path | None = None,
        data_mapping: str | Path | None = None,
        layer_mapping: str | Path | None = None,
    ):
        self.cross = cross_framework or bool(api_mapping or cell_mapping or layer_mapping)
        self.apis: dict[str, ApiRule] = {}
        if self.cross:
            self.apis = {ms: ApiRule(pt) for ms, pt in default_api_mapping().items()}
        if api_mapping:
            self.apis.update(read_api_mapping(api_mapping))
        self.cells = read_flat_mapping(cell_mapping, "cell_mapping") if cell_mapping else {}
        self.data = read_flat_mapping(data_mapping, "data_mapping") if data_mapping else {}
        self.layers = read_layer_mapping(layer_mapping) if layer_mapping else {}

    @property
    def active(self) -> bool:
        return self.cross or bool(self.data)

    def __call__(self, name: str) -> str:
        if name in self.data:
            return self.data[name]
        if not self.cross:
            return name
        if name.startswith("Cell."):
            return self._module(name)
        return self._api(name)

    def _module(self, name: str) -> str:
        body = name[len("Cell.") :]
        for ms, pt in self.cells.items():
            if body.startswith(ms + "."):
                return f"Module.{pt}{body[len(ms) :]}"
        if self.layers:
            parts = body.split(".")
            body = ".".join(self.layers.get(part, part) for part in parts)
        return f"Module.{body}"

    def _api(self, name: str) -> str:
        parts = name.split(".")
        if len(parts) < 2:
            return name
        rule = self.apis.get(f"{parts[0]}.{parts[1]}")
        if rule is None:
            return name
        renamed = rule.pt_api + name[len(parts[0]) + len(parts[1]) + 1 :]
        if not rule.args and not rule.outputs:
            return renamed
        item = parse_item(renamed)
        if item is None:
            return renamed
        table = rule.args if item.side == "input" else rule.outputs
        return replace(item, index=table.get(item.index, item.index)).format()
