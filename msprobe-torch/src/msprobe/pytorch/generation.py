"""Dumping generation (HuggingFace ``generate`` and any loop that calls the model once per token).

``dump_generation(debugger, model)`` makes each forward of ``model`` one
dump step: the prefill is step 0 and each decode step the next, so step k
holds the calls that chose token k (of the batch). Two runs dumped this way
compare step by step, and the diagnosis's first divergent step is the first
token whose computation differs, with the call it names. With
``per="request"`` each ``generate`` call is one step instead. A forward that
never runs makes no step, so nothing empty is left behind.
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Iterator
from typing import Any

logger = logging.getLogger(__name__)


@contextlib.contextmanager
def dump_generation(debugger: Any, model: Any, per: str = "token") -> Iterator[None]:
    """Within the block, every forward of ``model`` (``per="token"``) or every ``model.generate`` call
    (``per="request"``) is one dump step of ``debugger``; the model is left as it was afterwards."""
    if per not in ("token", "request"):
        from msprobe.core.errors import UsageError

        raise UsageError(f"dump_generation's per is 'token' or 'request', not {per!r}")
    depth = {"open": 0}  # generate may call forward within a forward (assisted decoding): the outer call counts

    def begin() -> None:
        depth["open"] += 1
        if depth["open"] == 1:
            debugger.start(model)

    def end() -> None:
        depth["open"] -= 1
        if depth["open"] == 0:
            debugger.stop()
            debugger.step()

    if per == "token":
        handles = [
            model.register_forward_pre_hook(lambda *_: begin()),
            model.register_forward_hook(lambda *_: end()),
        ]
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
        begin()
        try:
            return original(*args, **kwargs)
        finally:
            end()

    model.generate = generate
    try:
        yield
    finally:
        if own:
            model.generate = original
        else:
            del model.generate  # the class's method shows through again


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
