"""Dumping generation (HuggingFace ``generate`` and any loop that calls the model once per token).

``dump_generation(debugger, model)`` makes each forward of ``model`` one
dump step: the prefill is step 0 and each decode step the next, so step k
holds the calls that chose token k (of the batch). Two runs dumped this way
compare step by step, and the diagnosis's first divergent step is the first
token whose computation differs, with the call it names. With
``per="request"`` each ``generate`` call is one step instead. A forward that
never runs makes no step, so nothing empty is left behind.

With the config's ``request_id``, each forward tells the debugger its rows:
row ``i`` of the batch is request ``request_ids[i]`` (its row number when
``request_ids`` is not given), and every row brings the forward's sequence
length in tokens, so only that request's rows are dumped.
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Iterator, Sequence
from typing import Any

from msprobe.core.recording.tensor_cuts import find_request

logger = logging.getLogger(__name__)


@contextlib.contextmanager
def dump_generation(
    debugger: Any, model: Any, per: str = "token", request_ids: Sequence[Any] | None = None
) -> Iterator[None]:
    """Within the block, every forward of ``model`` (``per="token"``) or every ``model.generate`` call
    (``per="request"``) is one dump step of ``debugger``; the model is left as it was afterwards.
    ``request_ids``: the batch's rows' ids, for the config's ``request_id`` (default: the row numbers)."""
    if per not in ("token", "request"):
        from msprobe.core.errors import UsageError

        raise UsageError(f"dump_generation's per is 'token' or 'request', not {per!r}")
    depth = {"open": 0}  # generate may call forward within a forward (assisted decoding): the outer call counts
    cut = getattr(debugger, "tensor_cut", None)
    keeps_request = cut is not None and cut.request_id is not None
    batch: dict[str, Any] = {}  # this forward's requests and tokens each, when a request is kept

    def rows_of(args: tuple, kwargs: dict) -> None:
        batch.clear()
        if keeps_request:
            batch.update(_requests_in(args, kwargs, request_ids))
            if per == "request" and depth["open"] and "request_ids" in batch:  # a step spans forwards
                cut.rows = find_request(cut.request_id, batch["request_ids"], batch["scheduled_tokens"])
        elif not depth["open"]:  # the dump's header says the batch's sizes all the same (docs/serving.md)
            shape = getattr(kwargs.get("input_ids", args[0] if args else None), "shape", None)
            if shape is not None and len(shape) >= 2:
                debugger.batch = {"requests": int(shape[0]), "tokens": int(shape[0]) * int(shape[1])}

    def begin() -> None:
        depth["open"] += 1
        if depth["open"] == 1:
            debugger.start(model, **batch)

    def end() -> None:
        depth["open"] -= 1
        if depth["open"] == 0:
            debugger.stop()
            debugger.step()

    def before_forward(_module: Any, args: tuple, kwargs: dict) -> None:
        rows_of(args, kwargs)
        cache = kwargs.get("past_key_values", kwargs.get("cache"))  # "cache" from transformers 5.x on
        if cache is not None:  # what this forward's attention grows by a step (see KvCacheTensors)
            debugger.note_kv_cache(_tensors_in(cache))
        if per == "token":
            begin()

    handles = [model.register_forward_pre_hook(before_forward, with_kwargs=True)]
    if per == "token":
        handles.append(model.register_forward_hook(lambda *_: end()))
        try:
            yield
        finally:
            for handle in handles:
                handle.remove()
            if depth["open"]:  # a forward that raised: its step is closed, not left open
                depth["open"] = 1
                end()
        return
    original, own = model.generate, "generate" in vars(model)

    def generate(*args: Any, **kwargs: Any) -> Any:
        rows_of(args, kwargs)  # the prompts' rows, for start(); each forward then sets its own
        begin()
        try:
            return original(*args, **kwargs)
        finally:
            end()

    model.generate = generate
    try:
        yield
    finally:
        for handle in handles:
            handle.remove()
        if own:
            model.generate = original
        else:
            del model.generate  # the class's method shows through again


def _tensors_in(cache: Any, depth: int = 3) -> list[Any]:
    """The tensors a HuggingFace cache holds: a Cache object's layers' keys and values (or its key_cache and
    value_cache lists), or a tuple of tuples of tensors."""
    import torch

    if isinstance(cache, torch.Tensor):
        return [cache]
    if depth == 0:
        return []
    if isinstance(cache, (list, tuple)):
        items: Any = cache
    elif isinstance(cache, dict):
        items = cache.values()
    else:
        items = getattr(cache, "__dict__", {}).values()
    return [tensor for item in items for tensor in _tensors_in(item, depth - 1)]


def _requests_in(args: tuple, kwargs: dict, request_ids: Sequence[Any] | None) -> dict[str, Any]:
    """start()'s request_ids and scheduled_tokens for a HuggingFace forward or generate call: its input ids' (or
    embeddings') batch rows, each bringing the sequence length in tokens. Empty when the call shows neither."""
    inputs = kwargs.get("input_ids", args[0] if args else None)
    if inputs is None:
        inputs = kwargs.get("inputs_embeds")
    shape = getattr(inputs, "shape", None)
    if shape is None or len(shape) < 2:
        return {}
    rows, tokens = int(shape[0]), int(shape[1])
    ids = list(request_ids) if request_ids is not None else list(range(rows))
    if len(ids) != rows:
        from msprobe.core.errors import UsageError

        raise UsageError(f"dump_generation: {len(ids)} request_ids for a batch of {rows} rows")
    return {"request_ids": ids, "scheduled_tokens": [tokens] * rows}


def teacher_forced_logprobs(model: Any, sequences: Any, prompt_length: int) -> list[list[float]]:
    """The training side of the train/infer consistency check: each generated token's log-probability (float64)
    from one forward of the whole sequence, as a training step computes it (no KV cache), for every row of
    ``sequences`` (prompt then generated tokens, ``prompt_length`` the prompt's)."""
    import torch

    with torch.no_grad():
        logits = model(sequences).logits[:, prompt_length - 1 : -1]
    logprobs = torch.log_softmax(logits.double(), dim=-1)
    chosen = logprobs.gather(-1, sequences[:, prompt_length:].unsqueeze(-1)).squeeze(-1)
    return chosen.tolist()
