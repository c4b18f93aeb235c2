"""What went wrong in one generated response, from its own tokens and log-probabilities, with no golden run.

Four kinds of finding, each with the span of tokens it covers:

- ``nan``: a token whose log-probability (or entropy) is not a number or is
  infinite: the forward pass that chose it overflowed.
- ``repetition``: the same run of 1 to ``max_period`` tokens repeated back to
  back, at least ``min_repeats`` times and over at least ``min_span`` tokens
  (a model stuck in a loop).
- ``entropy_collapse``: at least ``collapse_window`` tokens in a row whose
  entropy is under ``collapse_ratio`` times the response's typical (median)
  entropy, where that typical entropy is itself not small: the distribution
  went to a point, as it does in a loop or after a broken layer.
  Without entropies the chosen tokens' surprise (the negative
  log-probability, whose mean estimates the entropy) stands in; it is the
  weaker test, since a greedy decoder's surprise is near zero wherever the
  text is predictable.
- ``garbled``: a burst of unlikely tokens: at least ``burst_count`` of any
  ``burst_window`` tokens in a row chosen with a probability under
  ``rare_probability`` (sampled noise, a broken kernel's logits).

The thresholds are arguments with defaults that pass ordinary sampled text;
``bench`` and the tests measure them on injected faults with clean
controls.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np

KINDS = ("nan", "repetition", "entropy_collapse", "garbled")


@dataclass(frozen=True)
class Finding:
    kind: str  # one of KINDS
    start: int  # the first token of the span
    end: int  # one past its last token
    detail: str

    def line(self) -> str:
        return f"{self.kind} at tokens {self.start}-{self.end - 1}: {self.detail}"


@dataclass(frozen=True)
class Thresholds:
    max_period: int = 32
    min_repeats: int = 3
    min_span: int = 8
    collapse_window: int = 24
    collapse_ratio: float = 0.05
    least_typical_entropy: float = 0.5  # nats; a response this certain throughout has nothing to collapse from
    rare_probability: float = 1e-4
    burst_window: int = 6
    burst_count: int = 4


def response_anomalies(
    tokens: Sequence[int],
    logprobs: Sequence[float],
    entropies: Sequence[float] | None = None,
    thresholds: Thresholds = Thresholds(),
) -> list[Finding]:
    """Every finding in one response, in token order. ``logprobs[i]`` is the log-probability of ``tokens[i]``
    when it was chosen; ``entropies[i]``, when given, the entropy (nats) of that step's distribution. Worked in
    numpy arrays of a byte or eight per token, so a response of millions of tokens costs a few times its
    values' size, not a Python object per token and flag."""
    if len(tokens) != len(logprobs) or (entropies is not None and len(entropies) != len(tokens)):
        raise ValueError("tokens, logprobs and entropies must have one value per token")
    token_array = np.asarray(tokens, dtype=np.int64)
    logprob_array = np.asarray(logprobs, dtype=np.float64)
    entropy_array = None if entropies is None else np.asarray(entropies, dtype=np.float64)
    found = [
        *_nonfinite(logprob_array, entropy_array),
        *_repetitions(token_array, thresholds),
        *_collapse(logprob_array, entropy_array, thresholds),
        *_garbled(logprob_array, thresholds),
    ]
    return sorted(found, key=lambda finding: (finding.start, KINDS.index(finding.kind)))


def _spans(flags: np.ndarray) -> list[tuple[int, int]]:
    """The runs of True, as (start, end)."""
    edges = np.diff(np.concatenate(([False], flags, [False])).astype(np.int8))
    starts, ends = np.flatnonzero(edges == 1), np.flatnonzero(edges == -1)
    return [(int(start), int(end)) for start, end in zip(starts, ends)]


def _nonfinite(logprobs: np.ndarray, entropies: np.ndarray | None) -> list[Finding]:
    flags = ~np.isfinite(logprobs)
    if entropies is not None:
        flags |= ~np.isfinite(entropies)
    return [Finding("nan", start, end, f"{end - start} token(s) chosen from a distribution that is not finite")
            for start, end in _spans(flags)]  # fmt: skip


def _repetitions(tokens: np.ndarray, thresholds: Thresholds) -> list[Finding]:
    """Back-to-back repeats of a period p: tokens[i] == tokens[i - p] over a stretch; the shortest period that
    explains a stretch is named, and overlapping stretches are merged."""
    found: list[tuple[int, int, int]] = []  # start, end, period
    flags = np.zeros(len(tokens), dtype=bool)
    for period in range(1, thresholds.max_period + 1):
        flags[:] = False
        if period < len(tokens):
            np.equal(tokens[period:], tokens[:-period], out=flags[period:])
        for start, end in _spans(flags):
            span_start = start - period  # the first copy of the repeated run
            repeats = (end - span_start) / period
            if repeats >= thresholds.min_repeats and end - span_start >= thresholds.min_span:
                found.append((span_start, end, period))
    merged: list[list[int]] = []
    for start, end, period in sorted(found):
        if merged and start < merged[-1][1]:
            last = merged[-1]
            last[1] = max(last[1], end)
            last[2] = min(last[2], period)
        else:
            merged.append([start, end, period])
    return [
        Finding("repetition", start, end, f"a run of {period} token(s) repeated {(end - start) / period:.1f} times")
        for start, end, period in merged
    ]


def _collapse(logprobs: np.ndarray, entropies: np.ndarray | None, thresholds: Thresholds) -> list[Finding]:
    values = entropies if entropies is not None else -logprobs
    finite_flags = np.isfinite(values)
    finite = values[finite_flags]
    if len(finite) < thresholds.collapse_window * 2:
        return []  # too short to know what is typical for it
    # an entropy's typical value is its median; a surprise's mean is what estimates the entropy (most chosen
    # tokens are likely ones, so its median sits far below); the mean summed exactly, as statistics.fmean does
    typical = float(np.median(finite)) if entropies is not None else math.fsum(finite) / len(finite)
    if typical < thresholds.least_typical_entropy:
        return []
    floor = thresholds.collapse_ratio * typical
    flags = finite_flags & (values < floor)
    what = "entropy" if entropies is not None else "surprise"
    return [
        Finding("entropy_collapse", start, end, f"{what} under {floor:.3g} nats for {end - start} tokens "
                f"(typical {typical:.3g})")
        for start, end in _spans(flags)
        if end - start >= thresholds.collapse_window
    ]  # fmt: skip


def _garbled(logprobs: np.ndarray, thresholds: Thresholds) -> list[Finding]:
    rare = math.log(thresholds.rare_probability)
    unlikely = np.isfinite(logprobs) & (logprobs < rare)
    window, count = thresholds.burst_window, thresholds.burst_count
    size = len(logprobs)
    # the windows of ``window`` tokens holding at least ``count`` unlikely ones, and the tokens they cover
    running = np.concatenate(([0], np.cumsum(unlikely, dtype=np.int64)))
    starts = np.flatnonzero(running[window:] - running[: max(size - window + 1, 0)] >= count)
    cover = np.zeros(size + 1, dtype=np.int64)
    np.add.at(cover, starts, 1)
    np.add.at(cover, starts + window, -1)
    flags = unlikely & (np.cumsum(cover[:size]) > 0)
    found = []
    for start, end in _spans(_bridged(flags, window)):
        rare_tokens = int(unlikely[start:end].sum())
        found.append(Finding("garbled", start, end, f"{rare_tokens} of {end - start} tokens chosen with "
                             f"probability under {thresholds.rare_probability:g}"))  # fmt: skip
    return found


def _bridged(flags: np.ndarray, gap: int) -> np.ndarray:
    """Flags with the gaps shorter than ``gap`` between two flagged tokens filled, so one burst is one span."""
    flagged = np.flatnonzero(flags)
    lefts, rights = flagged[:-1], flagged[1:]
    short = (rights - lefts > 1) & (rights - lefts < gap)
    filled = np.zeros(len(flags) + 1, dtype=np.int64)
    np.add.at(filled, lefts[short] + 1, 1)
    np.add.at(filled, rights[short], -1)
    return flags | (np.cumsum(filled[: len(flags)]) > 0)


def write_report(findings: list[tuple[str, Finding]], path: Path) -> Path:
    """The findings as CSV (Response, Kind, Start, End, Detail), written whole or not at all."""
    from msprobe.core.generation.responses import write_rows

    rows = ([name, f.kind, f.start, f.end, f.detail] for name, f in findings)
    return write_rows(path, ["Response", "Kind", "Start", "End", "Detail"], rows)
