"""Keeping part of each dumped tensor: one request's rows out of a batch, and a slice per dimension.

A serving engine runs many requests in one forward, so a tensor's first
dimension holds either one row per request (a padded batch, logits of the
last tokens) or one row per scheduled token (the engine's flat token
dimension, or a padded batch flattened by a view). ``request_id`` (config)
keeps one request: ``start(request_ids=..., scheduled_tokens=...)`` says who
is in this forward and how many tokens each brings, and each tensor whose
first dimension counts the requests or their tokens keeps the kept
request's rows. Parameters are never cut, and a tensor whose first dimension
counts neither is kept whole (a weight, a position table, a causal mask).
``slice`` (26.x) then keeps part of each dimension of what is left, Python's
slice rules per dimension. The framework applies the index this module
computes; the rules live here once for both.
"""

from __future__ import annotations

import weakref
from collections.abc import Iterable, Sequence
from typing import Any

from msprobe.core.errors import UsageError

# names under which a call passes or returns its attention KV cache: tensors reached through one are summarised,
# never copied to a file (a cache grows with every decode step and holds nothing the step's own K and V do not)
KV_CACHE_NAMES = frozenset(
    {"past_key_values", "past_key_value", "layer_past", "kv_cache", "kv_caches", "key_cache", "value_cache"}
)


# calls that grow a cache by a step: what they make from a cache tensor is the cache again
_GROWING_CALLS = frozenset({"cat", "concat", "concatenate"})


def reaches_kv_cache(data_stem: str) -> bool:
    """Whether a value's place in its entry (``call.kwargs.past_key_values.0.1``) passes through a KV cache's name."""
    return any(part in KV_CACHE_NAMES for part in data_stem.split("."))


class KvCacheTensors:
    """The tensors a run knows to hold a KV cache: those under a cache's name, those the engine names
    (``note_kv_cache``), and what a concatenation grows from one of them (a cache object that appends a step).

    In task tensor they get statistics and no file. Held by weak reference:
    the set never keeps a cache alive.
    """

    def __init__(self) -> None:
        self._known: dict[int, weakref.ref] = {}
        self._growing: str | None = None  # the call whose inputs held a cache tensor: its outputs are one too

    def add(self, tensors: Iterable[Any]) -> None:
        for tensor in tensors:
            try:
                self._known[id(tensor)] = weakref.ref(tensor)
            except TypeError:  # no weak references: not remembered
                pass
        if len(self._known) > 4096:  # caches of finished requests go
            self._known = {key: ref for key, ref in self._known.items() if ref() is not None}

    def holds(self, tensor: Any, data_stem: str) -> bool:
        """Whether this value of an entry is a KV cache (remembered, when it is, for the calls that take it)."""
        call, given, _ = data_stem.partition(".input.")
        if given and call != self._growing:  # another call's inputs: the last growing call is over
            self._growing = None
        ref = self._known.get(id(tensor))
        if (ref is not None and ref() is tensor) or reaches_kv_cache(data_stem):
            parts = call.split(".")
            if given and len(parts) > 1 and parts[1] in _GROWING_CALLS:
                self._growing = call
            self.add([tensor])
            return True
        growing = self._growing
        if growing is not None and data_stem.startswith(growing + ".output."):
            self.add([tensor])
            return True
        return False


class RequestRows:
    """Where the kept request sits in this forward: its position among the requests and its tokens' rows."""

    __slots__ = ("length", "offset", "position", "requests", "tokens")

    def __init__(self, position: int, requests: int, offset: int, length: int, tokens: int):
        self.position, self.requests = position, requests
        self.offset, self.length, self.tokens = offset, length, tokens

    def rows(self, leading: int) -> tuple[int, int] | None:
        """The kept request's rows of a first dimension this long; None: it counts neither requests nor tokens."""
        if leading == self.tokens:
            return self.offset, self.offset + self.length
        if leading == self.requests:
            return self.position, self.position + 1
        return None


def find_request(keep: Any, request_ids: Sequence[Any], scheduled_tokens: Sequence[int] | None) -> RequestRows | None:
    """The kept request's rows in a forward of ``request_ids`` (None: it is not in this forward).

    ``scheduled_tokens[i]``: how many tokens request ``i`` brings to this
    forward (its prompt's length at prefill, 1 per decode step). Omitted:
    one each. Ids match by their text, so 7 and "7" are one request.
    """
    ids = [str(item) for item in request_ids]
    if scheduled_tokens is None:
        scheduled_tokens = [1] * len(ids)
    counts = list(scheduled_tokens)
    if len(counts) != len(ids):
        raise UsageError(
            f"start(): scheduled_tokens has {len(counts)} counts for {len(ids)} request_ids; give one per request"
        )
    for count in counts:
        if isinstance(count, bool) or not isinstance(count, int) or count < 0:
            raise UsageError(f"start(): scheduled_tokens must be non-negative integers, got {count!r}")
    if len(set(ids)) != len(ids):
        raise UsageError("start(): request_ids holds the same id twice")
    if str(keep) not in ids:
        return None
    position = ids.index(str(keep))
    return RequestRows(position, len(ids), sum(counts[:position]), counts[position], sum(counts))


class TensorCut:
    """What part of each tensor a run keeps: the config's ``request_id`` and ``slice``, and this forward's rows."""

    def __init__(self, request_id: str | None, slices: Sequence[tuple[int | None, int | None, int | None]]):
        self.request_id = request_id
        self.slices = [slice(*bounds) for bounds in slices]
        self.rows: RequestRows | None = None  # set by start() for each forward

    def index(self, shape: Sequence[int], is_parameter: bool = False) -> tuple[slice, ...] | None:
        """The index that keeps this tensor's part (``tensor[index]``), or None to keep it whole."""
        if not shape or is_parameter:
            return None
        index: list[slice] = []
        if self.rows is not None:
            rows = self.rows.rows(shape[0])
            if rows is not None:
                index.append(slice(*rows))
        if self.slices:
            if index:  # the slice applies to the request's rows, counted from its first
                first = self.slices[0].indices(index[0].stop - index[0].start)
                index[0] = slice(index[0].start + first[0], index[0].start + max(first[1], first[0]), first[2])
                index.extend(self.slices[1 : len(shape)])
            else:
                index.extend(self.slices[: len(shape)])
        return tuple(index) if index else None


def tensor_cut(config: Any) -> TensorCut | None:
    """The run's cut from its config (task statistics or tensor), or None when it keeps every tensor whole."""
    if config.task not in ("statistics", "tensor"):
        return None
    section = config.section
    request_id = getattr(section, "request_id", None)
    slices = getattr(section, "slices", None) or []
    if request_id is None and not slices:
        return None
    bounds = [(item.start, item.end, item.step) for item in slices]
    return TensorCut(None if request_id is None else str(request_id), bounds)
