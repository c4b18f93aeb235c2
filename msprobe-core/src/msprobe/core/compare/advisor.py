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


class AdviceFinder:
    """The first suspicious node, found as the table's rows come: a streamed compare feeds it a part of the table
    at a time (each part holding whole calls), the in-memory one the whole table at once.

    Calls are looked at in table order, parameter gradients last: they are written next to their forward but
    happen in backward. A call with no counterpart just before the first failing call whose inputs already
    differ is named instead: the runs called different APIs there.
    """

    def __init__(self) -> None:
        self.found: Advice | None = None
        self._unmatched_since_clean: list[str] = []
        self._gradients: list[tuple[str, list[str], list[bool], list[bool]]] = []
        # what merge() needs when this finder saw a later part of the table than another
        self._saw_clean = False
        self._found_before_clean = False
        self._found_inputs_failed = False

    def merge(self, later: AdviceFinder) -> None:
        """Continue with what ``later`` found on the part of the table after this finder's part, as if this
        finder had been fed that part itself."""
        if self.found is not None:
            return
        prefix = self._unmatched_since_clean
        if later.found is not None:
            self.found = later.found
            if later._found_inputs_failed and later._found_before_clean and prefix:
                self.found = _no_counterpart(prefix[0])  # the unmatched run began in this finder's part
            return
        if later._saw_clean:
            self._unmatched_since_clean = list(later._unmatched_since_clean)
        else:
            self._unmatched_since_clean = prefix + later._unmatched_since_clean
        self._saw_clean = self._saw_clean or later._saw_clean
        self._gradients.extend(later._gradients)

    def feed(self, names: list[str], bench_names: list[str], failing: np.ndarray, entries: list[str]) -> None:
        """Rows in table order, with each row's NPU call (N/A for a bench value alone)."""
        if self.found is not None:
            return
        if names and not failing.any() and NA not in bench_names and NA not in entries:
            # every call matched and none failing (two healthy runs): each one only clears the unmatched run
            calls = set(entries)
            gradients = sum(1 for entry in calls if entry.endswith(".parameters_grad"))
            if gradients < len(calls):
                self._unmatched_since_clean.clear()
                self._saw_clean = True
            if gradients:
                self._gradients.append(("", [""], [True], [False]))  # stands for them: a clean call
            return
        failing_rows = failing.tolist()
        calls: dict[str, tuple[list[str], list[bool], list[bool]]] = {}
        for name, bench_name, failed, entry in zip(names, bench_names, failing_rows, entries):
            if entry == NA:
                continue
            rows = calls.setdefault(entry, ([], [], []))
            rows[0].append(name)
            rows[1].append(bench_name != NA)
            rows[2].append(bool(failed))
        for entry, (row_names, matched, failed) in calls.items():
            if entry.endswith(".parameters_grad"):
                self._gradients.append((entry, row_names, matched, failed))
            elif self._look_at(entry, row_names, matched, failed):
                return

    def result(self) -> Advice:
        if self.found is None:
            for call in self._gradients:
                if self._look_at(*call):
                    break
            self._gradients.clear()
        return self.found or Advice(None, "", "")

    def _look_at(self, entry: str, names: list[str], matched: list[bool], failed: list[bool]) -> bool:
        if not any(matched):
            self._unmatched_since_clean.append(entry)
            return False
        failed_names = [name for name, paired, bad in zip(names, matched, failed) if paired and bad]
        if not failed_names:
            self._unmatched_since_clean.clear()
            self._saw_clean = True
            return False
        inputs_failed = any(".input." in name or name.endswith(".input") for name in failed_names)
        outputs_failed = any(".output." in name for name in failed_names)
        self._found_before_clean, self._found_inputs_failed = not self._saw_clean, inputs_failed
        if inputs_failed and self._unmatched_since_clean:
            self.found = _no_counterpart(self._unmatched_since_clean[0])
            return True
        reason = "its outputs differ" if outputs_failed and not inputs_failed else "its values differ"
        self.found = Advice(entry, reason, _cause(entry, inputs_failed))
        return True


def _no_counterpart(entry: str) -> Advice:
    return Advice(
        entry,
        "it has no counterpart in the benchmark run, and the data differs right after it",
        "the two runs call different APIs here (a changed or replaced operator)",
    )


def advise(result: CompareResult) -> Advice:
    finder = AdviceFinder()
    names = result.table["NPU Name"].tolist()
    entries = result.calls or [NA if name == NA else _entry_of(name) for name in names]
    finder.feed(names, result.table["Bench Name"].tolist(), failed_rows(result), entries)
    return finder.result()


def _entry_of(row_name: str) -> str:
    for marker in (".input.", ".output.", ".parameters.", ".parameters_grad."):
        position = row_name.find(marker)
        if position != -1:
            return (
                row_name[:position] if marker != ".parameters_grad." else row_name[: position + len(".parameters_grad")]
            )
    return row_name
