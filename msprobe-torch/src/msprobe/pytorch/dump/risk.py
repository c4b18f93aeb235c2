"""``risk_level`` (mindstudio-probe 26.x): which PyTorch APIs a dump at L1 or mix keeps.

``CORE`` keeps the APIs where precision problems usually start: matrix
products, convolutions, normalisations, embeddings, attention, fused
optimizer steps, collectives and the NPU's fused operators. ``FOCUS``
keeps everything but the APIs that only move, reshape, convert or create
data (``reshape``, ``transpose``, ``to``, ``zeros``...). ``ALL`` keeps
every listed API. Modules are always kept, and a config with ``scope`` or
``list`` picks by those instead, as in the reference.

The APIs left out are not wrapped at all, so they cost nothing; the others
keep their numbers, which count calls of one API only.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from msprobe.core.config import DebuggerConfig

# by the API's own name, whatever its namespace (Functional.linear, Torch.matmul, Tensor.matmul)
_CORE_NAMES = frozenset(
    {
        "_fused_adam_",
        "_fused_adamw_",
        "matmul",
        "__matmul__",
        "__rmatmul__",
        "bmm",
        "addmm",
        "addmm_",
        "addbmm",
        "addbmm_",
        "baddbmm",
        "baddbmm_",
        "mm",
        "mv",
        "addmv",
        "addmv_",
        "addr",
        "addr_",
        "chain_matmul",
        "linear",
        "bilinear",
        "linalg.matmul",
        "linalg.multi_dot",
        "linalg.vecdot",
        "conv1d",
        "conv2d",
        "conv3d",
        "conv_transpose1d",
        "conv_transpose2d",
        "conv_transpose3d",
        "conv_tbc",
        "convolution",
        "_convolution",
        "batch_norm",
        "instance_norm",
        "layer_norm",
        "group_norm",
        "rms_norm",
        "local_response_norm",
        "_batch_norm_impl_index",
        "batch_norm_elemt",
        "batch_norm_stats",
        "batch_norm_update_stats",
        "batch_norm_gather_stats",
        "batch_norm_gather_stats_with_counts",
        "batch_norm_backward_elemt",
        "batch_norm_backward_reduce",
        "embedding",
        "embedding_bag",
        "multi_head_attention_forward",
        "scaled_dot_product_attention",
    }
)
_CORE_NAMESPACES = ("Distributed.", "NPU.")  # every collective and every fused NPU operator

_SHAPE_DTYPE_AND_CREATION = frozenset(
    {
        # shape and layout
        "squeeze",
        "unsqueeze",
        "reshape",
        "reshape_as",
        "view",
        "view_as",
        "flatten",
        "unflatten",
        "ravel",
        "expand",
        "expand_as",
        "repeat",
        "repeat_interleave",
        "tile",
        "transpose",
        "permute",
        "moveaxis",
        "movedim",
        "swapaxes",
        "swapdims",
        "unfold",
        "align_as",
        "align_to",
        "atleast_1d",
        "atleast_2d",
        "atleast_3d",
        # splitting and joining
        "chunk",
        "unsafe_chunk",
        "split",
        "split_with_sizes",
        "unsafe_split",
        "unsafe_split_with_sizes",
        "tensor_split",
        "hsplit",
        "vsplit",
        "dsplit",
        "unbind",
        "stack",
        "cat",
        "concat",
        "concatenate",
        "hstack",
        "vstack",
        "dstack",
        "column_stack",
        "row_stack",
        # dtype and device
        "to",
        "type_as",
        "float",
        "double",
        "int",
        "long",
        "half",
        "bfloat16",
        "byte",
        "char",
        "bool",
        "cfloat",
        "numpy",
        # low risk in the reference's list too
        "clone",
        "clamp",
        # creation
        "empty",
        "empty_like",
        "zeros",
        "zeros_like",
        "ones",
        "ones_like",
        "full",
        "full_like",
        "arange",
        "linspace",
        "logspace",
        "eye",
        "identity",
        "diag",
        "diagflat",
        "diag_embed",
        "triu",
        "tril",
        "triu_indices",
        "tril_indices",
        # no data of their own
        "__bool__",
        "stride",
    }
)


def api_risk(key: str) -> str:
    """``CORE``, ``FOCUS`` or ``LOW`` for an API key such as ``Functional.linear`` or ``Tensor.reshape``."""
    if key.startswith(_CORE_NAMESPACES):
        return "CORE"
    api = key.split(".", 1)[1] if "." in key else key
    if api in _CORE_NAMES:
        return "CORE"
    if api in _SHAPE_DTYPE_AND_CREATION:
        return "LOW"
    return "FOCUS"


def api_selection(config: DebuggerConfig) -> Callable[[str], bool] | None:
    """Which API keys a dump with this config wraps (None: all of them)."""
    if config.level not in ("L1", "mix") or config.scope or config.api_list:
        return None
    level = config.effective_risk_level
    if level == "CORE":
        return lambda key: api_risk(key) == "CORE"
    if level == "FOCUS":
        return lambda key: api_risk(key) != "LOW"
    return None
