"""Entry names as the one-process run writes them, for the entries of a run wrapped for data parallelism.

DDP holds the model as its ``module``: every module path starts with ``module.``, and the model itself, the
whole of which the dump never records, becomes an entry of its own (``Module.module.Net.forward.0``). FSDP2
gives each sharded module a class of its own, ``FSDP`` and the class's name (``FSDPLinear``).
"""

from __future__ import annotations

import re

# Module.{path}.{Class}.{forward|backward}.{n}, and Module.{path}.{Class}.parameters_grad
_MODULE = re.compile(
    r"^(?P<prefix>Module|Cell)\.(?P<path>.+)\.(?P<cls>[^.]+)\.(?P<rest>(?:forward|backward)\.\d+|parameters_grad)$"
)


def canonical(name: str, ddp: bool) -> str | None:
    """The name the one-process run gives this entry; None for the model itself under DDP (no entry there)."""
    match = _MODULE.match(name)
    if match is None:
        return name
    path, cls = match["path"], match["cls"]
    if ddp:
        if path == "module":
            return None
        path = path.removeprefix("module.")
    if cls.startswith("FSDP") and len(cls) > 4:
        cls = cls[4:]
    return f"{match['prefix']}.{path}.{cls}.{match['rest']}"


def module_path(name: str) -> str | None:
    """``Module.blocks.0.attn.Attention.forward.0`` -> ``blocks.0.attn``; None for an API's entry."""
    match = _MODULE.match(name)
    return match["path"] if match is not None else None
