"""Name the first node where the two runs part ways, and a likely cause."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from msprobe.core.compare.engine import CompareResult
from msprobe.core.compare.highlight import statistics_suspects
from msprobe.core.compare.metrics import NA

_RANDOM_HINT = "a random API: seed both runs with seed_all(seed, mode=True, rm_dropout=True)"
_DTYPE_HINT = "a dtype conversion: the runs compute in different precisions from here on"
_CAUSES = (
    (("Distributed.",), "a communication API: check the collective's inputs, group and reduction op on both sides"),
    (("dropout", "rand", "bernoulli", "multinomial", "normal"), _RANDOM_HINT),
    ((".to.", ".float.", ".half.", ".bfloat16.", ".type.", "type_as"), _DTYPE_HINT),
)


@dataclass
class Advice:
    node: str | None
    reason: str
    cause: str

    def text(self) -> str:
        if self.node is None:
            return "No suspicious node: every compared value is within the thresholds."
        return f"First suspicious node: {self.node}\nWhy: {self.reason}\nLikely cause: {self.cause}"


def failed_rows(result: CompareResult) -> np.ndarray:
    """Which rows count as failing: tensor accuracy 'No', md5 'Different', or scale-aware statistics."""
    table = result.table
    if result.mode == "tensor":
        return (table["Accuracy Reached or Not"] == "No").to_numpy()
    if result.mode == "md5":
        return (table["Result"] == "Different").to_numpy()
    return statistics_suspects(table)


def _cause(node: str, inputs_failed: bool) -> str:
    for needles, cause in _CAUSES:
        if any(needle in node for needle in needles):
            return cause
    if inputs_failed:
        return "its inputs already differ: the difference comes from earlier (data, preprocessing or an API not dumped)"
    return "its inputs agree but its outputs do not: this API or module computes differently in the two runs"


def advise(result: CompareResult) -> Advice:
    failing = failed_rows(result)
    names = result.table["NPU Name"].tolist()
    bench_names = result.table["Bench Name"].tolist()
    entries: list[str] = []
    rows_of: dict[str, list[int]] = {}
    unmatched_since_clean: list[str] = []
    for index, name in enumerate(names):
        if name == NA:
            continue
        entry = _entry_of(name)
        if entry not in rows_of:
            rows_of[entry] = []
            entries.append(entry)
        rows_of[entry].append(index)
    # parameter gradients are written next to their forward but happen in backward: look at them last
    ordered = [e for e in entries if not e.endswith(".parameters_grad")] + [
        e for e in entries if e.endswith(".parameters_grad")
    ]
    for entry in ordered:
        indexes = rows_of[entry]
        matched = [i for i in indexes if bench_names[i] != NA]
        if not matched:
            unmatched_since_clean.append(entry)
            continue
        failed = [i for i in matched if failing[i]]
        if not failed:
            unmatched_since_clean.clear()
            continue
        inputs_failed = any(".input." in names[i] or names[i].endswith(".input") for i in failed)
        outputs_failed = any(".output." in names[i] for i in failed)
        if inputs_failed and unmatched_since_clean:
            origin = unmatched_since_clean[0]
            return Advice(
                origin,
                "it has no counterpart in the benchmark run, and the data differs right after it",
                "the two runs call different APIs here (a changed or replaced operator)",
            )
        reason = "its outputs differ" if outputs_failed and not inputs_failed else "its values differ"
        return Advice(entry, reason, _cause(entry, inputs_failed))
    return Advice(None, "", "")


def _entry_of(row_name: str) -> str:
    for marker in (".input.", ".output.", ".parameters.", ".parameters_grad."):
        position = row_name.find(marker)
        if position != -1:
            return (
                row_name[:position] if marker != ".parameters_grad." else row_name[: position + len(".parameters_grad")]
            )
    return row_name
