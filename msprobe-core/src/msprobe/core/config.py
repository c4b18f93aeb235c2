"""The config.json of the reference tool, validated.

The schema is the reference's (common fields plus one section per task), so an
existing config works unchanged. Every field carries a description: it is the
source of the comments that ``msprobe config init`` writes and of the docs.
A bad file never starts anything: :func:`load_config` raises one
:class:`~msprobe.core.errors.ConfigError` naming the file and the field.
"""

from __future__ import annotations

import bisect
import contextlib
import itertools
import json
import logging
import os
import re
from collections.abc import Iterable, Iterator
from contextvars import ContextVar
from pathlib import Path
from typing import Any, Literal

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    PrivateAttr,
    ValidationError,
    field_serializer,
    field_validator,
    model_validator,
)

from msprobe.core.dump.summarizer import SummaryPlan, summary_plan
from msprobe.core.errors import ConfigError
from msprobe.core.recording.filters import REGEX_PREFIX
from msprobe.core.tasks import BUILTIN_TASKS

logger = logging.getLogger(__name__)

TASKS = tuple(task.name for task in BUILTIN_TASKS)
LEVELS = ("L0", "L1", "mix", "L2", "debug")
RISK_LEVELS = ("ALL", "CORE", "FOCUS")
SUMMARY_MODES = ("statistics", "md5", "xor")
# fields only mindstudio-probe 26.x knows: a config holding one is read the 26.x way (see DebuggerConfig.follows_26x)
FIELDS_26X = ("extra_info", "precision", "risk_level", "dump_enable")
DATA_MODES = ("all", "forward", "backward", "input", "output")
PERTURBATIONS = ("improve_precision", "add_noise", "bit_noise", "no_change", "change_value", "to_cpu")

Level = Literal["L0", "L1", "mix", "L2", "debug"]
DataMode = Literal["all", "forward", "backward", "input", "output"]


class IdSet:
    """Ranks or steps as sorted, merged intervals: "0-99999999999" costs two numbers, not a list of them.

    Answers ``in``, ``bool``, ``len`` and iteration like the list it stands for, and compares equal to it.
    """

    __slots__ = ("_ends", "_starts")

    def __init__(self, intervals: Iterable[tuple[int, int]] = ()):
        merged: list[list[int]] = []
        for start, end in sorted(intervals):
            if merged and start <= merged[-1][1] + 1:
                merged[-1][1] = max(merged[-1][1], end)
            else:
                merged.append([start, end])
        self._starts = [start for start, _ in merged]
        self._ends = [end for _, end in merged]

    def __contains__(self, value: object) -> bool:
        if not isinstance(value, int):
            return False
        index = bisect.bisect_right(self._starts, value) - 1
        return index >= 0 and value <= self._ends[index]

    def __bool__(self) -> bool:
        return bool(self._starts)

    def __len__(self) -> int:
        return sum(end - start + 1 for start, end in self.intervals)

    def __iter__(self) -> Iterator[int]:
        for start, end in self.intervals:
            yield from range(start, end + 1)

    def __eq__(self, other: object) -> bool:
        if isinstance(other, IdSet):
            return self.intervals == other.intervals
        if isinstance(other, (list, tuple)):
            return len(self) == len(other) and list(self) == list(other)
        return NotImplemented

    __hash__ = None  # mutable-looking: compared by value

    def __repr__(self) -> str:
        return f"IdSet({self.as_config()!r})"

    @property
    def intervals(self) -> list[tuple[int, int]]:
        return list(zip(self._starts, self._ends))

    def as_config(self) -> list[int | str]:
        """The config file's spelling: single ids as ints, runs as "a-b"."""
        return [start if start == end else f"{start}-{end}" for start, end in self.intervals]

    def as_text(self, separator: str = "|") -> str:
        """ "0|4-6", the form MindSpore's kernel dump takes for its iterations."""
        return separator.join(str(item) for item in self.as_config())


def parse_id_list(values: Any) -> IdSet:
    """``[0, "4-6"]``, the reference's rank/step syntax, as the set {0, 4, 5, 6}, kept as intervals."""
    if isinstance(values, IdSet):
        return values
    if values is None:
        return IdSet()
    if isinstance(values, (int, str)) and not isinstance(values, bool):
        values = [values]
    if not isinstance(values, (list, tuple)):
        raise ValueError("must be a list of non-negative integers or 'a-b' ranges")
    intervals: list[tuple[int, int]] = []
    for item in values:
        if isinstance(item, bool):
            raise ValueError(f"{item!r} is not an integer")
        if isinstance(item, int):
            if item < 0:
                raise ValueError(f"{item} is negative")
            intervals.append((item, item))
            continue
        if not isinstance(item, str):
            raise ValueError(f"{item!r} is neither an integer nor an 'a-b' range")
        text = item.strip()
        if text.isdigit():
            intervals.append((int(text), int(text)))
            continue
        parts = text.split("-")
        if len(parts) != 2 or not parts[0].strip().isdigit() or not parts[1].strip().isdigit():
            raise ValueError(f"bad range {item!r}: expected 'start-end' with non-negative integers")
        start, end = int(parts[0]), int(parts[1])
        if start > end:
            raise ValueError(f"bad range {item!r}: start is greater than end")
        intervals.append((start, end))
    return IdSet(intervals)


class _Section(BaseModel):
    model_config = ConfigDict(extra="forbid", populate_by_name=True, arbitrary_types_allowed=True)


def _positive_or_all(value: int) -> int:
    """A count where -1 means no limit."""
    if value == 0 or value < -1:
        raise ValueError("must be a positive integer or -1")
    return value


def _as_list(value: Any) -> Any:
    return [value] if isinstance(value, str) else value


class _ScopedSection(_Section):
    scope: list[str] = Field(
        default_factory=list,
        description="Two full names (modules or APIs) bounding the range to dump, e.g. "
        "['Module.conv1.Conv2d.forward.0', 'Module.fc2.Linear.forward.0']; empty: no bound.",
    )
    api_list: list[str] = Field(
        default_factory=list,
        alias="list",
        description="Full API names, API kinds such as 'relu', module names (level mix) "
        "or 'name-regex(...)' patterns to dump; empty: everything.",
    )
    data_mode: list[DataMode] = Field(
        default_factory=lambda: ["all"],
        description="Which data to keep: 'all', or any of 'forward', 'backward', 'input', 'output'.",
    )

    _check_data_mode_str = field_validator("data_mode", mode="before")(_as_list)

    @field_validator("api_list")
    @classmethod
    def _patterns_compile(cls, items: list[str]) -> list[str]:
        """A bad name-regex is refused here, not found only when the first API is filtered."""
        for item in items:
            if item.startswith(REGEX_PREFIX) and item.endswith(")"):
                try:
                    re.compile(item[len(REGEX_PREFIX) : -1])
                except re.error as exc:
                    raise ValueError(f"{item!r} is not a valid regular expression: {exc}") from None
        return items

    @field_validator("scope")
    @classmethod
    def _scope_is_a_pair(cls, scope: list[str]) -> list[str]:
        if scope and len(scope) != 2:
            raise ValueError(f"must hold exactly two names (start and end), got {len(scope)}")
        return scope

    @field_validator("data_mode")
    @classmethod
    def _all_stands_alone(cls, modes: list[str]) -> list[str]:
        if "all" in modes and len(modes) > 1:
            raise ValueError("'all' cannot be combined with other modes")
        if not modes:
            raise ValueError("must not be empty; use ['all']")
        return modes


class DimensionSlice(_Section):
    """One dimension's part, Python's slice rules: ``{"end": 1024}`` keeps its first 1024."""

    start: int | None = Field(default=None, description="First index kept (negative: from the end).")
    end: int | None = Field(default=None, description="Index the part stops before (negative: from the end).")
    step: int | None = Field(default=None, ge=1, description="Keep every step-th index.")


class _CutSection(_ScopedSection):
    slices: list[DimensionSlice] = Field(
        default_factory=list,
        alias="slice",
        description="26.x: part of each tensor to keep, one {start, end, step} per dimension from the first, "
        "e.g. [{'end': 1024}]; the entry's shape and values are those of the part.",
    )
    request_id: str | int | None = Field(
        default=None,
        description="Serving: keep only this request's rows of each tensor; start(request_ids=..., "
        "scheduled_tokens=...) says which rows of each forward are whose (see docs/serving.md).",
    )


class StatisticsSection(_CutSection):
    summary_mode: str | list[str] = Field(
        default="statistics",
        description="'statistics' (Max/Min/Mean/Norm), 'md5' (adds a CRC-32 of each tensor) or 'xor' "
        "(26.x, PyTorch: an XOR checksum as md5, without the statistics).",
    )
    tensor_list: list[str] = Field(
        default_factory=list,
        description="26.x: APIs whose real tensors a statistics dump also saves; msprobe accepts only [] so far.",
    )

    @field_validator("tensor_list")
    @classmethod
    def _no_tensor_list_yet(cls, items: list[str]) -> list[str]:
        if items:
            raise ValueError("msprobe does not save real tensors inside a statistics dump yet; use task 'tensor' "
                             "with 'list' for those APIs, or leave tensor_list empty")  # fmt: skip
        return items

    @field_validator("summary_mode")
    @classmethod
    def _known_mode(cls, mode: str | list[str]) -> str | list[str]:
        if isinstance(mode, str):
            if mode not in SUMMARY_MODES:
                raise ValueError(f"must be 'statistics', 'md5' or 'xor', got {mode!r}")
            return mode
        unknown = [item for item in mode if item not in ("max", "min", "mean", "l2norm")]
        if unknown or not mode:
            raise ValueError("a list may hold only 'max', 'min', 'mean', 'l2norm' (MindSpore graph-mode L2)")
        return mode


class TensorSection(_CutSection):
    file_format: Literal["npy", "bin"] = Field(
        default="npy", description="MindSpore graph-mode L2 only: 'npy' or 'bin'."
    )
    summary_mode: Literal["statistics", "md5", "xor"] | None = Field(
        default=None, description="26.x: as statistics.summary_mode, for this task (unset: statistics' own)."
    )
    bench_path: str | None = Field(
        default=None,
        description="26.x, PyTorch: an earlier md5 dump of the same script; each API's checksums are compared "
        "with it as the run goes, and tensors are written only for the first diff_nums that differ.",
    )
    diff_nums: int = Field(
        default=1, description="With bench_path: how many differing APIs get their tensors; -1: all."
    )

    _diff_nums = field_validator("diff_nums")(classmethod(lambda cls, value: _positive_or_all(value)))

    @model_validator(mode="after")
    def _bench_needs_checksums(self) -> TensorSection:
        if self.bench_path is not None:
            if not self.bench_path.strip():
                raise ValueError("bench_path: must not be empty")
            if self.summary_mode not in ("md5", "xor"):
                raise ValueError("bench_path: needs summary_mode 'md5' (or 'xor') in this section")
        return self

    online_run_ut: bool = Field(default=False, description="Stream tensors to an online run_ut host.")
    nfs_path: str | None = Field(default=None, description="Online pre-check: shared directory.")
    host: str | None = Field(default=None, description="Online pre-check: receiver address.")
    port: int | None = Field(default=None, ge=-1, le=65535, description="Online pre-check: receiver port (-1: unset).")
    tls_path: str | None = Field(
        default=None, description="Online pre-check: folder with client.key and client.crt; '' for plain TCP."
    )
    auth_token_path: str | None = Field(
        default=None,
        description="Online pre-check: a file holding the shared token the receiver expects (not in the reference).",
    )
    online_run_ut_recompute: bool = Field(
        default=False, description="Online pre-check: the model uses recomputation (skip backward checks)."
    )
    online_queue_size: int = Field(
        default=64, ge=1, description="Online pre-check (msprobe): APIs waiting to be sent before any is dropped."
    )
    online_block_seconds: float = Field(
        default=0.5, ge=0, description="Online pre-check (msprobe): longest wait for room in the queue before a drop."
    )


class RunUtSection(_Section):
    white_list: list[str] = Field(default_factory=list, description="Only these APIs are checked.")
    black_list: list[str] = Field(default_factory=list, description="These APIs are not checked.")
    error_data_path: str = Field(default="./", description="Where inputs/outputs of failing APIs are saved.")
    is_online: bool = Field(default=False, description="Run as the online pre-check receiver.")
    nfs_path: str | None = Field(default=None, description="Online pre-check: shared directory.")
    host: str | None = Field(default=None, description="Online pre-check: address to listen on.")
    port: int | None = Field(
        default=None, ge=-1, le=65535, description="Online pre-check: port to listen on (-1: unset)."
    )
    rank_list: list[int] = Field(default_factory=lambda: [0], description="Ranks whose APIs are checked online.")
    tls_path: str | None = Field(
        default=None, description="Online pre-check: folder with server.key and server.crt; '' for plain TCP."
    )
    # the receiver's protection (not in the reference's config): see docs/security.md
    auth_token_path: str | None = Field(
        default=None, description="Online pre-check: a file holding the token every sender must present."
    )
    allow_plain_remote: bool = Field(
        default=False,
        description="Online pre-check: listen beyond this machine over plain TCP with no token (anyone may send).",
    )
    max_connections: int = Field(default=64, gt=0, description="Online pre-check: connections open at once.")
    max_frame_mb: int = Field(default=256, gt=0, description="Online pre-check: largest frame (one API) in MiB.")
    idle_timeout: float = Field(
        default=120.0, gt=0, description="Online pre-check: seconds a connection may wait mid-frame or between frames."
    )
    max_waiting_forwards: int = Field(
        default=4096, gt=0, description="Online pre-check: forwards kept waiting for their backward (oldest dropped)."
    )
    loopback_token: bool = Field(
        default=True,
        description="Online pre-check: on this machine with no token configured, make one that only senders of "
        "this user can read.",
    )
    max_unauthenticated: int = Field(
        default=8, gt=0, description="Online pre-check: connections waiting to show the token (oldest dropped)."
    )
    hello_timeout: float = Field(
        default=5.0, gt=0, description="Online pre-check: seconds a new connection has to show the token."
    )


class OverflowCheckSection(_Section):
    overflow_nums: int = Field(default=1, description="Stop after this many overflows; -1: never stop.")
    check_mode: Literal["all", "aicore", "atomic"] = Field(
        default="all", description="MindSpore only: 'all', 'aicore' or 'atomic'."
    )

    _overflow_nums = field_validator("overflow_nums")(classmethod(lambda cls, value: _positive_or_all(value)))


class FreeBenchmarkSection(_Section):
    scope: list[str] = Field(default_factory=list, description="Full API names to check (PyTorch).")
    api_list: list[str] = Field(default_factory=list, alias="list", description="API kinds or names to check.")
    fuzz_device: Literal["npu", "cpu"] = Field(
        default="npu", description="'npu': perturb in place; 'cpu': compare with CPU."
    )
    pert_mode: str = Field(
        default="improve_precision",
        description="Perturbation: improve_precision, add_noise, bit_noise, no_change, change_value, "
        "to_cpu, or one a plugin adds.",
    )
    handler_type: Literal["check", "fix"] = Field(
        default="check", description="'check' reports, 'fix' replaces the output."
    )
    fuzz_level: Literal["L1"] = Field(default="L1", description="Only 'L1'.")
    fuzz_stage: Literal["forward", "backward"] = Field(default="forward", description="'forward' or 'backward'.")
    if_preheat: bool = Field(default=False, description="Tune thresholds over the first steps.")
    preheat_step: int = Field(default=15, gt=0, description="Steps of preheating.")
    max_sample: int = Field(default=20, gt=0, description="Samples per API while preheating.")

    @model_validator(mode="after")
    def _consistent(self) -> FreeBenchmarkSection:
        if self.scope and self.api_list:
            raise ValueError("'scope' and 'list' cannot both be set")
        if self.fuzz_device == "cpu" and self.pert_mode != "to_cpu":
            raise ValueError("fuzz_device 'cpu' needs pert_mode 'to_cpu'")
        if self.handler_type == "fix":
            if self.pert_mode in PERTURBATIONS and self.pert_mode not in ("improve_precision", "to_cpu"):
                # a plugin's perturbation says itself whether it can fix: checked when the run starts
                raise ValueError("handler_type 'fix' works only with pert_mode 'improve_precision' or 'to_cpu'")
            if self.fuzz_stage != "forward":
                raise ValueError("handler_type 'fix' works only with fuzz_stage 'forward'")
            if self.if_preheat:
                raise ValueError("handler_type 'fix' cannot be combined with if_preheat")
        return self


FLIGHT_TRIGGERS = ("nonfinite", "loss_spike", "flush")


class FlightRecorderSection(_ScopedSection):
    window: int = Field(default=5, ge=1, le=1000, description="Steps kept in memory and written when triggered.")
    triggers: list[Literal["nonfinite", "loss_spike", "flush"]] = Field(
        default_factory=lambda: list(FLIGHT_TRIGGERS),
        description="What writes the window: 'nonfinite' (the first call that makes an inf or nan from finite inputs), "
        "'loss_spike' (a loss given to step(loss=...) breaking the monitor's anomaly rule), 'flush' (flush()).",
    )
    save_tensors: bool = Field(
        default=True, description="Save the inputs of the first call that produced an inf or nan (.pt/.npy)."
    )
    loss_threshold: float = Field(
        default=0.5, gt=0, description="Loss spike: relative distance from the running mean of the loss."
    )

    @field_validator("triggers")
    @classmethod
    def _some_trigger(cls, triggers: list[str]) -> list[str]:
        if not triggers:
            raise ValueError(f"must name at least one of {', '.join(FLIGHT_TRIGGERS)}")
        return triggers


class RerunSection(_Section):
    """StepGuard's switch (docs/rerun.md): read where the guard is given the debugger."""

    enabled: bool = Field(
        default=True,
        description="Save each step's starting state and run a step again when it is flagged; false: the guard "
        "only runs the step under the debugger, and keeps nothing.",
    )
    loss_threshold: float | None = Field(
        default=1.0,
        gt=0,
        description="A step whose loss or gradients' norm is more than this (relative) from its running mean is "
        "run again; null: only an inf or nan is.",
    )


class GradProbeSection(_Section):
    grad_level: Literal["L0", "L1", "L2"] = Field(
        default="L1", description="L0: stats+MD5; L1: stats+direction; L2: plus distribution."
    )
    param_list: list[str] = Field(default_factory=list, description="Parameters to watch; empty: all.")
    bounds: list[float] = Field(default_factory=lambda: [-1, 0, 1], description="Ascending bucket edges for L2.")

    @field_validator("bounds")
    @classmethod
    def _ascending(cls, bounds: list[float]) -> list[float]:
        if not bounds:
            raise ValueError("must hold at least one value")
        if any(later <= earlier for earlier, later in itertools.pairwise(bounds)):
            raise ValueError("must be strictly ascending")
        if any(abs(b) > 2**63 - 1 for b in bounds):
            raise ValueError("values must lie within the int64 range")
        return bounds


class DeclaredModuleLayout(_Section):
    """How one module's tensors are split over the tensor-parallel ranks, when they are plain tensors."""

    weight: int | None = Field(
        default=None, description="Dimension along which its parameters of two or more dimensions are split."
    )
    bias: int | None = Field(
        default=None, description="Dimension along which its one-dimensional parameters are split."
    )
    output: int | None = Field(
        default=None, description="Dimension along which the module's own output is split (unset: whole on each rank)."
    )
    calls: Literal["partial", "own"] | None = Field(
        default=None,
        description="'partial': the outputs of the calls made inside the module are partial sums over the ranks "
        "(a row-parallel linear's product before its all-reduce); 'own': they are the layout's own work (a "
        "vocab-parallel embedding's masking), left out of both runs, and the module is compared at its boundary.",
    )


class TensorParallelSection(_Section):
    """A Megatron-style tensor-parallel layout of plain tensors, declared so a compare can merge the ranks as it
    merges DTensors. Recorded in each rank's dump.json; not in the reference's config."""

    ranks: list[int] = Field(
        default_factory=list, description="The tensor-parallel group, in shard order; empty: every rank of the run."
    )
    modules: dict[str, DeclaredModuleLayout] = Field(
        default_factory=dict,
        description="Module path patterns (fnmatch: '*.fc1', 'embed') and how each module's tensors are split.",
    )


class DebuggerConfig(_Section):
    """The whole config file."""

    task: str = Field(
        default="statistics",
        description="What to do: " + ", ".join(TASKS) + " ('acc_check' is 26.x's name for run_ut), "
        "or a task an installed plugin adds.",
    )
    dump_path: str | None = Field(
        default=None, description="Folder the results are written to (not needed by the online run_ut receiver)."
    )
    rank: IdSet = Field(default_factory=IdSet, description="Ranks to dump, ints or 'a-b' ranges; empty: all.")
    step: IdSet = Field(default_factory=IdSet, description="Steps to dump, ints or 'a-b' ranges; empty: all.")
    level: Level = Field(default="L1", description="L0 modules, L1 APIs, mix both, L2 kernels, debug for save().")
    enable_dataloader: bool = Field(
        default=False, description="PyTorch: stop by itself after the last step (deprecated)."
    )
    async_dump: bool = Field(default=False, description="Gather on the device and write at step end.")
    extra_info: bool = Field(
        default=True, description="26.x: write stack.json and construct.json; false: dump.json alone."
    )
    precision: Literal["high", "low"] = Field(
        default="low",
        description="26.x: 'high' computes device statistics in float32, 'low' in the tensor's dtype; "
        "msprobe always accumulates in float32 or wider, so both give the same values (see docs/config.md).",
    )
    risk_level: Literal["ALL", "CORE", "FOCUS"] | None = Field(
        default=None,
        description="26.x, PyTorch L1/mix without scope or list: 'ALL' APIs, 'CORE' (matrix products, "
        "convolutions, norms, embeddings, attention, fused optimizers, collectives, NPU ops) or 'FOCUS' "
        "(all but shape, dtype and creation APIs). Unset: 'ALL' in a 1.2.2-style config, 'FOCUS' in a 26.x one.",
    )
    dump_enable: bool | None = Field(
        default=None,
        description="26.x: set it, and start() re-reads the config file whenever it changed: false pauses "
        "the dump, true resumes it, and other edited fields take effect too.",
    )
    folder_without_rank: Literal["rank", "proc"] = Field(
        default="rank",
        description="Folder of a process with no rank: 'rank' (as 1.2.2 writes) or 'proc' for proc{pid} "
        "(as 26.x writes; not in the reference's config).",
    )
    strict: bool = Field(
        default=False,
        description="Raise an error that happens inside the tool instead of logging it once and going on "
        "(to find a bug in the tool or a plugin; not in the reference's config).",
    )
    framework: str | None = Field(
        default=None, description="Backend to use ('pytorch' or 'mindspore'); optional when only one is installed."
    )
    tensor_parallel: TensorParallelSection | None = Field(
        default=None, description="A declared layout of plain-tensor model parallelism (docs/parallel.md)."
    )
    statistics: StatisticsSection = Field(default_factory=StatisticsSection)
    tensor: TensorSection = Field(default_factory=TensorSection)
    run_ut: RunUtSection = Field(default_factory=RunUtSection)
    overflow_check: OverflowCheckSection = Field(default_factory=OverflowCheckSection)
    free_benchmark: FreeBenchmarkSection = Field(default_factory=FreeBenchmarkSection)
    grad_probe: GradProbeSection = Field(default_factory=GradProbeSection)
    flight_recorder: FlightRecorderSection = Field(default_factory=FlightRecorderSection)
    rerun: RerunSection = Field(
        default_factory=RerunSection, description="StepGuard's switch: re-run a flagged step (not in the reference's)."
    )

    plugin_sections: dict[str, Any] = Field(
        default_factory=dict, exclude=True, description="Sections of plugin tasks, validated by their models."
    )

    _expand_ids = field_validator("rank", "step", mode="before")(classmethod(lambda cls, v: parse_id_list(v)))
    _written_for_26x: bool = PrivateAttr(default=False)

    @model_validator(mode="wrap")
    @classmethod
    def _spelling_26x(cls, raw: Any, handler: Any) -> DebuggerConfig:
        """26.x's task 'acc_check' and its section are 1.2.2's 'run_ut'; a 26.x-only field marks the config."""
        if not isinstance(raw, dict):
            return handler(raw)
        acc_check = raw.get("task") == "acc_check" or "acc_check" in raw
        written_for_26x = acc_check or any(field in raw for field in FIELDS_26X)
        if acc_check:
            if "acc_check" in raw and "run_ut" in raw:
                raise ValueError("acc_check: give either 'acc_check' (26.x) or 'run_ut' (1.2.2), not both")
            raw = {("run_ut" if key == "acc_check" else key): value for key, value in raw.items()}
            if raw.get("task") == "acc_check":
                raw["task"] = "run_ut"
        config = handler(raw)
        config._written_for_26x = written_for_26x
        return config

    @field_serializer("rank", "step")
    def _ids_as_written(self, ids: IdSet) -> list[int | str]:
        return ids.as_config()

    @model_validator(mode="before")
    @classmethod
    def _plugin_task_sections(cls, raw: Any) -> Any:
        """A section named after a plugin task is that plugin's: set it aside for its model to check."""
        if not isinstance(raw, dict) or all(key in cls.model_fields for key in raw):
            return raw  # no key a plugin could own: no need to discover the plugins
        plugin_tasks = {name: task for name, task in known_tasks().items() if name not in TASKS}
        sections = {key: raw[key] for key in raw if key in plugin_tasks}
        if not sections:
            return raw
        raw = {key: value for key, value in raw.items() if key not in sections}
        checked = {}
        for name, value in sections.items():
            model = plugin_tasks[name].section
            try:
                checked[name] = model.model_validate(value) if model is not None else value
            except ValidationError as exc:
                problems = "; ".join(
                    f"{name}.{_field_path(tuple(error.get('loc', ())))}: {_message(error)}" for error in exc.errors()
                )
                raise ValueError(problems) from None
        return {**raw, "plugin_sections": checked}

    @field_validator("task")
    @classmethod
    def _known_task(cls, value: str) -> str:
        if value in TASKS:  # a built-in task needs no plugin discovery
            return value
        known = known_tasks()
        if value not in known:
            raise ValueError(f"unknown task '{value}' (known: {', '.join(known)})")
        return value

    @field_validator("dump_path")
    @classmethod
    def _non_empty(cls, value: str | None) -> str | None:
        if value is not None and not value.strip():
            raise ValueError("must not be empty")
        return value

    @model_validator(mode="after")
    def _task_rules(self) -> DebuggerConfig:
        if self.dump_path is None and self.task != "run_ut":
            raise ValueError("dump_path: required field is missing")
        if self.async_dump and self.task == "tensor" and not self.tensor.api_list:
            raise ValueError("async_dump: with task 'tensor' it needs tensor.list to name what to dump")
        if self.task == "free_benchmark" and self.level != "L1":
            raise ValueError("level: task 'free_benchmark' works only at level 'L1'")
        if self.task == "flight_recorder" and self.level not in ("L1", "mix"):
            raise ValueError("level: task 'flight_recorder' records at level 'L1' or 'mix'")
        if self.task == "flight_recorder" and self.async_dump:
            raise ValueError("async_dump: the flight recorder keeps its steps in memory already")
        if self.async_dump and self._written_for_26x:  # 26.x's rules; 1.2.2 ignored the switch elsewhere
            if self.task not in ("statistics", "tensor"):
                raise ValueError(f"async_dump: works only with task 'statistics' or 'tensor', not '{self.task}'")
            if self.level == "L2":
                raise ValueError("async_dump: does not work at level 'L2'")
        return self

    @property
    def follows_26x(self) -> bool:
        """Written for mindstudio-probe 26.x: it holds a field only 26.x knows, or task/section 'acc_check'."""
        return self._written_for_26x

    @property
    def effective_risk_level(self) -> str:
        """``risk_level`` as set, else 26.x's default (FOCUS) for a 26.x config and ALL for a 1.2.2 one."""
        if self.risk_level is not None:
            return self.risk_level
        return "FOCUS" if self.follows_26x else "ALL"

    @property
    def section(self) -> BaseModel | None:
        """The section of the chosen task (None for 'structure' and for a plugin task without one)."""
        if self.task in self.plugin_sections:
            return self.plugin_sections[self.task]
        return getattr(self, self.task, None) if self.task in TASKS else None

    @property
    def summary_mode(self) -> str:
        own = getattr(self.section, "summary_mode", None) if self.task == "tensor" else None
        mode = own or self.statistics.summary_mode
        return mode if isinstance(mode, str) else "statistics"

    @property
    def summary_plan(self) -> SummaryPlan:
        """What each tensor summary holds (statistics, which checksum, files): the one decision both backends read."""
        return summary_plan(self.task, self.summary_mode)

    @property
    def live_diff(self) -> bool:
        """Task tensor with a bench_path: the md5 diff against an earlier run, as the run goes."""
        return self.task == "tensor" and self.tensor.bench_path is not None

    @property
    def scope(self) -> list[str]:
        return list(getattr(self.section, "scope", []) or [])

    @property
    def api_list(self) -> list[str]:
        return list(getattr(self.section, "api_list", []) or [])

    @property
    def data_mode(self) -> list[str]:
        return list(getattr(self.section, "data_mode", ["all"]) or ["all"])


DEFAULT_DUMP_PATH = "./dump_path"


def dump_path_problem(dump_path: str | None) -> str | None:
    """Why ``dump_path`` cannot hold a dump, read without creating anything: a file in its place or in the
    place of a folder above it, or a folder this user may not write in. None when it can (or is not set)."""
    if not dump_path:
        return None
    path = Path(dump_path)
    for part in (path, *path.parents):
        if part.exists():
            if not part.is_dir():
                return f"{part} is a file, not a folder" if part == path else f"{part}, above it, is a file"
            if not os.access(part, os.W_OK | os.X_OK):
                return f"{part} is a folder this user cannot write in"
            return None
    return None


def known_tasks() -> dict[str, Any]:
    """The task names a config may ask for: the built-in ones and those of installed plugins."""
    from msprobe.core.plugins import get_registry

    try:
        tasks = get_registry().tasks()
    except Exception as exc:  # validation must still work for the built-in tasks
        logger.debug("no plugin tasks: %s", exc)
        tasks = {}
    return {**dict.fromkeys(TASKS), **tasks}


def _field_path(loc: tuple[Any, ...]) -> str:
    text = ""
    for part in loc:
        if isinstance(part, int):
            text += f"[{part}]"
        else:
            text += ("." if text else "") + str(part)
    return text


def _message(error: dict[str, Any]) -> str:
    kind = error.get("type", "")
    if kind == "extra_forbidden":
        return "unknown key"
    if kind == "missing":
        return "required field is missing"
    msg = str(error.get("msg", "invalid value"))
    for prefix in ("Value error, ", "Assertion failed, "):
        if msg.startswith(prefix):
            msg = msg[len(prefix) :]
    return msg


# A config is a page of settings: larger files are refused before they are parsed, and one message names
# at most a few problems, each shortened, so a bad value is never echoed whole into a training log.
MAX_CONFIG_BYTES = 4 << 20
_MOST_PROBLEMS = 10
_LONGEST_PROBLEM = 300


def _shortened(text: str) -> str:
    return text if len(text) <= _LONGEST_PROBLEM else f"{text[: _LONGEST_PROBLEM - 3]}..."


def config_error_from_validation(exc: ValidationError, path: str | Path | None) -> ConfigError:
    """One message for all problems, each naming its field."""
    errors = exc.errors()
    parts = []
    for error in errors[:_MOST_PROBLEMS]:
        loc = tuple(p for p in error.get("loc", ()) if not str(p).startswith(("function-", "literal[", "list[")))
        where = _shortened(_field_path(loc))
        parts.append(f"{where}: {_shortened(_message(error))}" if where else _shortened(_message(error)))
    if len(errors) > _MOST_PROBLEMS:
        parts.append(f"and {len(errors) - _MOST_PROBLEMS} more problems")
    return ConfigError("; ".join(parts), path=path)


def read_config_file(path: str | Path) -> dict[str, Any]:
    """Parse a JSON or YAML config file into a dict, with one clear error on failure."""
    file = Path(path)
    if not file.exists():
        raise ConfigError("file not found", path=file)
    if not file.is_file():
        raise ConfigError("is not a file", path=file)
    try:
        with open(file, "rb") as handle:  # bounded, though the file may grow while it is read
            raw = handle.read(MAX_CONFIG_BYTES + 1)
        if len(raw) > MAX_CONFIG_BYTES:
            raise ConfigError(f"is larger than a config may be ({MAX_CONFIG_BYTES >> 20} MiB)", path=file)
        text = raw.decode("utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise ConfigError(f"cannot be read ({exc.__class__.__name__}: {exc})", path=file) from None
    if file.suffix.lower() in (".yaml", ".yml"):
        import yaml

        from msprobe.core.files import plain_yaml

        try:
            data = plain_yaml(text)
        except RecursionError:
            raise ConfigError("nested too deeply to be a config", path=file) from None
        except yaml.YAMLError as exc:
            mark = getattr(exc, "problem_mark", None)
            where = f" at line {mark.line + 1}, column {mark.column + 1}" if mark else ""
            problem = getattr(exc, "problem", None)
            raise ConfigError(f"invalid YAML{where}" + (f": {problem}" if problem else ""), path=file) from None
    else:
        try:
            data = json.loads(text)
        except json.JSONDecodeError as exc:
            raise ConfigError(f"invalid JSON at line {exc.lineno}, column {exc.colno}: {exc.msg}", path=file) from None
        except RecursionError:
            raise ConfigError("nested too deeply to be a config", path=file) from None
    if data is None:
        raise ConfigError("file is empty", path=file)
    if not isinstance(data, dict):
        raise ConfigError(f"top level must be an object, not {type(data).__name__}", path=file)
    return data


def load_config(path: str | Path | None = None, **overrides: Any) -> DebuggerConfig:
    """Load and validate a config; keyword arguments (task, dump_path, level, step...) win over the file.

    With no file at all the reference's defaults apply (dump_path './dump_path');
    a file that omits dump_path is an error unless ``dump_path=`` is given.
    """
    raw: dict[str, Any] = read_config_file(path) if path is not None else {"dump_path": DEFAULT_DUMP_PATH}
    for key, value in overrides.items():
        if value is not None:
            raw[key] = value
    try:
        return DebuggerConfig.model_validate(raw)
    except ValidationError as exc:
        raise config_error_from_validation(exc, path if path is not None else "PrecisionDebugger arguments") from None


_LOADED: ContextVar[tuple[str, DebuggerConfig] | None] = ContextVar("msprobe_loaded_config", default=None)


def _load_key(path: str | Path | None, overrides: dict[str, Any]) -> str:
    return repr((str(path) if path is not None else None, sorted(overrides.items())))


@contextlib.contextmanager
def loaded_once(path: str | Path | None = None, **overrides: Any) -> Iterator[DebuggerConfig]:
    """The config, loaded here, and taken as it is by the debugger made inside (:func:`load_config_once`) instead
    of read and checked again: the front door reads it to learn the framework, then makes that framework's
    debugger with the same arguments."""
    config = load_config(path, **overrides)
    token = _LOADED.set((_load_key(path, overrides), config))
    try:
        yield config
    finally:
        _LOADED.reset(token)


def load_config_once(path: str | Path | None = None, **overrides: Any) -> DebuggerConfig:
    """:func:`load_config`, or the config :func:`loaded_once` loaded with the same arguments (taken once)."""
    loaded = _LOADED.get()
    if loaded is not None and loaded[0] == _load_key(path, overrides):
        _LOADED.set(None)
        return loaded[1]
    return load_config(path, **overrides)


def validate_config_dict(data: dict[str, Any], source: str = "config") -> DebuggerConfig:
    try:
        return DebuggerConfig.model_validate(data)
    except ValidationError as exc:
        raise config_error_from_validation(exc, source) from None
