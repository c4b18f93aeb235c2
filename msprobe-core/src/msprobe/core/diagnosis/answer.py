"""The diagnosis's answer, and the words every surface prints for it."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any

DIVERGENCE, NONE, UNCERTAIN = "divergence", "none", "uncertain"

# cause -> the sentence a user reads; {module} is filled in
CAUSES = {
    "weights": "the weights of {module} differ",
    "data": "the inputs differ (data)",
    "undumped": "the inputs differ, computed by code no dump records",
    "argument": "a non-tensor argument differs",
    "computation": "the same inputs and weights give different outputs (the computation differs)",
    "calls": "this run makes extra calls, or misses calls",
    "inplace": "a tensor it is given is written in place after it starts, and read so by a later call",
    "backward": "only the backward differs (the gradient of {module})",
    "gradient": "the gradient it is given differs, made by no dumped call (the loss, or code no dump records)",
    "optimizer": "the optimizer step differs",
    "ranks": "the ranks of the sharded run disagree on a value they must share",
}


@dataclass
class Diagnosis:
    """Where two runs part ways and why; ``verdict`` is "divergence", "none" or "uncertain"."""

    verdict: str
    step: int | None = None
    rank: int | None = None
    phase: str | None = None  # "forward", "backward" or "optimizer"
    module: str | None = None  # the module's path ("blocks.1.fc"); None: outside every module
    api: str | None = None  # the call (a dump.json entry name; for a missing call, the benchmark's)
    cause: str | None = None  # a key of CAUSES
    detail: str = ""  # what exactly differs, in words
    confidence: str = "exact"  # "exact": everything before it is bit-identical; else "high", "medium" or "low"
    nonfinite: bool = False  # the call makes the first inf or nan from finite inputs
    error: float | None = None  # relative error of what differs there (None: a checksum alone, no distance)
    compared: int = 0  # calls paired between the runs
    ranks: list[int] = field(default_factory=list)  # at that step, every rank that diverges
    alone: bool = False  # one rank of several diverges
    followers: list[int] = field(default_factory=list)  # ranks of ``ranks`` that part ways only through a collective

    def where(self) -> str:
        parts = []
        if self.step is not None:
            parts.append(f"step {self.step}")
        leaders = [rank for rank in self.ranks if rank not in self.followers]
        if len(leaders) > 1:  # several ranks part ways each by itself: the line names them all
            parts.append("ranks " + ", ".join(map(str, leaders)))
        elif self.rank is not None:
            parts.append(f"rank {self.rank}" + (" alone" if self.alone else ""))
        if self.phase:
            parts.append(self.phase)
        module = f"module {self.module}" if self.module else "outside every module"
        parts.append(module)
        return ", ".join(parts)

    def reason(self) -> str:
        if self.cause is None:
            return self.detail
        text = CAUSES[self.cause].format(module=self.module or "the model")
        if self.detail:
            text += f" ({self.detail})"
        if self.nonfinite:
            text += "; its outputs hold the first inf or nan"
        return text

    def line(self) -> str:
        """The one-line answer every surface prints."""
        if self.verdict == NONE:
            return f"the runs do not part ways: {self.detail}" if self.detail else "the runs do not part ways"
        if self.verdict == UNCERTAIN:
            return f"uncertain where the runs part ways: {self.detail}"
        sure = "" if self.confidence == "exact" else f" [{self.confidence} confidence]"
        return f"the runs part ways at {self.api or '?'} ({self.where()}): {self.reason()}{sure}"

    def text(self) -> str:
        """The advisor file's words: the answer, then each part of it on a line."""
        lines = [self.line()]
        if self.verdict == DIVERGENCE:
            lines += [
                f"Call: {self.api or '(none dumped)'}",
                f"Where: {self.where()}",
                f"Why: {self.reason()}",
                f"Confidence: {self.confidence}",
            ]
            if len(self.ranks) > 1:
                lines.append(f"Ranks that part ways at step {self.step}: {', '.join(map(str, self.ranks))}")
        return "\n".join(lines)

    def as_dict(self) -> dict[str, Any]:
        found = asdict(self)
        found["answer"] = self.line()
        return found
