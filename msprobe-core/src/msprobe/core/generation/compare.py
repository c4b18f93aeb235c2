"""Two generations of the same requests, token by token: where the log-probabilities part ways, and where the
chosen tokens do. The train/infer consistency check is the same comparison of one set of tokens scored twice.

Responses pair by ``id``. At each position while the two responses have
chosen the same tokens so far, the chosen token's log-probability is
compared (a difference over ``tolerance`` nats is where the runs part
ways, however small the effect on the text), and the top-k candidates
where both runs give them. From the first position whose chosen tokens
differ on, the two responses continue different texts and are no longer
judged ("after divergence").
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from msprobe.core.generation.page import write_token_page
from msprobe.core.generation.responses import Response, read_responses, write_rows

TOLERANCE = 1e-3  # nats: well over a float32 rounding of a log-softmax, well under any fault worth finding
COLUMNS = [
    "Response",
    "Position",
    "NPU Token",
    "Bench Token",
    "NPU Logprob",
    "Bench Logprob",
    "Logprob Diff",
    "TopK Overlap",
    "Result",
]
PASS, LOGPROB, TOKEN, AFTER, MISSING = "pass", "logprob differs", "token differs", "after divergence", "missing"


@dataclass
class GenerationAnswer:
    """Where one request's two generations part ways."""

    response: str
    compared: int  # positions both responses have
    first_logprob: int | None = None  # the first position whose log-probabilities differ (tokens the same so far)
    logprob_gap: float = 0.0
    first_token: int | None = None  # the first position whose chosen tokens differ
    tokens: tuple[int, int] = (0, 0)
    lengths: tuple[int, int] = (0, 0)
    tolerance: float = TOLERANCE

    @property
    def agrees(self) -> bool:
        return self.first_logprob is None and self.first_token is None and self.lengths[0] == self.lengths[1]

    def line(self) -> str:
        if self.agrees:
            return (f"{self.response}: the generations agree over {self.compared} tokens "
                    f"(log-probabilities within {self.tolerance:g} nats)")  # fmt: skip
        parts = []
        if self.first_logprob is not None:
            parts.append(f"log-probabilities part ways at token {self.first_logprob} (by {self.logprob_gap:.3g} nats)")
        if self.first_token is not None:
            parts.append(f"the chosen tokens at token {self.first_token} ({self.tokens[0]} vs {self.tokens[1]})")
        else:
            parts.append(f"the chosen tokens agree over {self.compared} tokens")
        if self.lengths[0] != self.lengths[1]:
            parts.append(f"the NPU response has {self.lengths[0]} tokens, the bench {self.lengths[1]}")
        return f"{self.response}: " + ", ".join(parts)


def _overlap(npu: dict[int, float] | None, bench: dict[int, float] | None) -> float | str:
    if not npu or not bench:
        return "N/A"
    return len(set(npu) & set(bench)) / max(len(npu), len(bench))


def compare_pair(npu: Response, bench: Response, tolerance: float = TOLERANCE) -> tuple[list[list], GenerationAnswer]:
    """The per-token rows of one request and its answer."""
    answer = GenerationAnswer(npu.name, min(len(npu.tokens), len(bench.tokens)), tolerance=tolerance)
    answer.lengths = (len(npu.tokens), len(bench.tokens))
    rows = []
    for position in range(max(answer.lengths)):
        if position >= answer.compared:
            side = npu if position < len(npu.tokens) else bench
            token, logprob = side.tokens[position], side.logprobs[position]
            npu_cells = (token, logprob) if side is npu else ("N/A", "N/A")
            bench_cells = (token, logprob) if side is bench else ("N/A", "N/A")
            result = AFTER if answer.first_token is not None else MISSING  # one response ended, the other not
            rows.append([npu.name, position, npu_cells[0], bench_cells[0], npu_cells[1], bench_cells[1], "N/A",
                         "N/A", result])  # fmt: skip
            continue
        npu_token, bench_token = npu.tokens[position], bench.tokens[position]
        npu_logprob, bench_logprob = npu.logprobs[position], bench.logprobs[position]
        gap = abs(npu_logprob - bench_logprob) if math.isfinite(npu_logprob) and math.isfinite(bench_logprob) else (
            0.0 if npu_logprob == bench_logprob else math.inf)  # fmt: skip
        overlap = _overlap(_top(npu, position), _top(bench, position))
        if answer.first_token is not None:
            result = AFTER
        elif npu_token != bench_token:
            result = TOKEN
            answer.first_token, answer.tokens = position, (npu_token, bench_token)
        elif gap > tolerance:
            result = LOGPROB
        else:
            result = PASS
        if result in (TOKEN, LOGPROB) and answer.first_logprob is None and gap > tolerance:
            answer.first_logprob, answer.logprob_gap = position, gap
        rows.append([npu.name, position, npu_token, bench_token, npu_logprob, bench_logprob, gap, overlap, result])
    return rows, answer


def _top(response: Response, position: int) -> dict[int, float] | None:
    tops = response.top_logprobs
    return tops[position] if tops is not None else None


@dataclass
class GenerationCompare:
    rows: int
    suspicious: int
    unmatched: int
    answers: list[GenerationAnswer]
    files: list[Path]
    consistency: Consistency | None = None


def compare_generations(
    npu: Sequence[Response], bench: Sequence[Response], tolerance: float = TOLERANCE
) -> tuple[list[list], list[GenerationAnswer], int]:
    """Every paired request's rows and answer, and how many responses found no partner."""
    bench_by_name = {response.pairing_key: response for response in bench}
    rows, answers, unmatched = [], [], 0
    for response in npu:
        partner = bench_by_name.pop(response.pairing_key, None)
        if partner is None:
            unmatched += 1
            continue
        pair_rows, answer = compare_pair(response, partner, tolerance)
        rows.extend(pair_rows)
        answers.append(answer)
    return rows, answers, unmatched + len(bench_by_name)


@dataclass
class Consistency:
    """How far one set of tokens' log-probabilities under training is from the same tokens' under inference."""

    tokens: int
    over: int  # tokens whose log-probabilities differ by more than the tolerance
    mean_gap: float
    max_gap: float
    kl: float  # the mean of exp(d) - 1 - d, d = inference - training log-probability: KL(training || inference)
    tolerance: float = TOLERANCE

    def line(self) -> str:
        return (f"train/infer: {self.over} of {self.tokens} tokens differ by more than {self.tolerance:g} nats; "
                f"mean |d| {self.mean_gap:.3g}, max |d| {self.max_gap:.3g}, KL estimate {self.kl:.3g}")  # fmt: skip


def consistency(train: Sequence[Response], infer: Sequence[Response], tolerance: float = TOLERANCE) -> Consistency:
    """The same tokens scored by the training forward and by the inference engine (26.x's consistent check): the
    tokens must be the same on both sides, request by request."""
    from msprobe.core.errors import UsageError

    by_name = {response.pairing_key: response for response in infer}
    gaps, kl = [], 0.0
    for response in train:
        other = by_name.get(response.pairing_key)
        if other is None:
            continue
        ours, theirs = np.asarray(response.tokens, dtype=np.int64), np.asarray(other.tokens, dtype=np.int64)
        shared = min(len(ours), len(theirs))
        differing = np.flatnonzero(ours[:shared] != theirs[:shared])
        if len(differing) or len(ours) != len(theirs):
            position = int(differing[0]) if len(differing) else shared
            raise UsageError(f"request {response.name}: the tokens differ at token {position}; the consistency "
                             "check scores the same tokens on both sides")  # fmt: skip
        for trained, inferred in zip(response.logprobs, other.logprobs):
            d = inferred - trained
            gaps.append(abs(d) if math.isfinite(d) else math.inf)
            kl += math.expm1(d) - d if math.isfinite(d) else math.inf
    count = len(gaps)
    finite = [gap for gap in gaps if math.isfinite(gap)]
    return Consistency(
        count,
        sum(gap > tolerance for gap in gaps),
        sum(finite) / len(finite) if finite else 0.0,
        max(gaps, default=0.0),
        kl / count if count else 0.0,
        tolerance,
    )


def compare_generation_files(
    npu_path: Path, bench_path: Path, output_dir: Path, stamp: str, tolerance: float = TOLERANCE,
    consistent: bool = False,
) -> GenerationCompare:  # fmt: skip
    """``msprobe compare`` of two JSON-lines files of responses: the per-token CSV and the answers.
    ``consistent``: the train/infer consistency check, ``npu_path`` the training side's scores."""
    from msprobe.core.errors import UsageError

    if not (isinstance(tolerance, (int, float)) and math.isfinite(tolerance) and tolerance >= 0):
        # nan would make every difference "not more than the tolerance": every compare would pass
        raise UsageError(f"the log-probability tolerance must be a finite number of nats, 0 or more, not {tolerance}")
    npu, bench = read_responses(npu_path), read_responses(bench_path)
    summary = consistency(npu, bench, tolerance) if consistent else None
    rows, answers, unmatched = compare_generations(npu, bench, tolerance)
    path = output_dir / f"generation_compare_{stamp}.csv"
    write_rows(path, COLUMNS, rows)
    info = f"{npu_path.name} (NPU) against {bench_path.name} (bench): {len(answers)} requests paired"
    try:
        page = write_token_page(output_dir / f"generation_compare_{stamp}.html", answers, rows, info)
    except BaseException:  # the results are written whole or not at all: a table without its page is neither
        path.unlink(missing_ok=True)
        raise
    suspicious = sum(row[-1] in (TOKEN, LOGPROB, MISSING) for row in rows)
    return GenerationCompare(len(rows), suspicious, unmatched, answers, [path, page], summary)


def is_generation_file(path: Path) -> bool:
    """Whether a compare input is a file of responses (JSON lines) rather than a dump."""
    return path.suffix == ".jsonl" and path.is_file()
