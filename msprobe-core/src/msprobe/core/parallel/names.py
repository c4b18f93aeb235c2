"""Entry names as the one-process run writes them, for the entries of a run wrapped for data parallelism.

DDP holds the model as its ``module``: every module path starts with ``module.``, and the model itself, the
whole of which the dump never records, becomes an entry of its own (``Module.module.Net.forward.0``). FSDP2
gives each sharded module a class of its own, ``FSDP`` and the class's name (``FSDPLinear``).
"""

from __future__ import annotations

from msprobe.core.dump.entry_names import PARAMETERS_GRAD, module_entry, parse_entry


def canonical(name: str, ddp: bool) -> str | None:
    """The name the one-process run gives this entry; None for the model itself under DDP (no entry there)."""
    parsed = parse_entry(name)
    if parsed is None or not parsed.is_module:
        return name
    path, cls = parsed.path or "", parsed.cls or ""
    if ddp:
        if path == "module":
            return None
        path = path.removeprefix("module.")
    if cls.startswith("FSDP") and len(cls) > 4:
        cls = cls[4:]
    return module_entry(parsed.prefix, path, cls, parsed.direction or PARAMETERS_GRAD, parsed.count)
