"""The monitor's config file: which ops, which tensors, where to, and its alert rules."""

from __future__ import annotations

import logging
import time
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

from msprobe.core.config import config_error_from_validation, read_config_file
from msprobe.core.errors import ConfigError, UsageError

logger = logging.getLogger(__name__)


OPS = ("min", "max", "norm", "mean", "zeros", "nans", "std", "amax", "dynamic_range")
OUTPUT_ENV = "MONITOR_OUTPUT_DIR"
RUN_FOLDER_TIME = "%b%d_%H-%M-%S"  # run folders are named {time}-rank{R}


class AlertRule(BaseModel):
    model_config = ConfigDict(extra="forbid")
    rule_name: Literal["AnomalyTurbulence"]
    args: dict[str, float] = Field(default_factory=lambda: {"threshold": 0.5})


class Alert(BaseModel):
    model_config = ConfigDict(extra="forbid")
    rules: list[AlertRule] = Field(default_factory=list)
    dump: bool = False


class MonitorConfig(BaseModel):
    """The reference's monitor config; unknown keys are errors, as for config.json."""

    model_config = ConfigDict(extra="forbid")
    targets: dict[str, Any] = Field(default_factory=dict)
    xy_distribution: bool = False
    all_xy: bool = False
    forward_only: bool = False
    backward_only: bool = False
    wg_distribution: bool = False
    mv_distribution: bool = False
    param_distribution: bool = False
    ur_distribution: bool = False
    cc_distribution: dict[str, Any] = Field(default_factory=dict)
    ops: list[str] = Field(default_factory=lambda: ["min", "max", "norm", "nans"])
    eps: float = 1e-8
    ndigits: int = Field(default=6, ge=0, le=17)
    format: Literal["csv", "tensorboard", "api"] = "csv"
    step_count_per_record: int = Field(default=1, ge=1)
    start_step: int = Field(default=0, ge=0)
    step_interval: int = Field(default=1, ge=1)
    collect_times: int = Field(default=10**8, ge=1)
    alert: Alert = Field(default_factory=Alert)
    print_struct: bool = False
    module_ranks: list[int] = Field(default_factory=list)
    squash_name: bool = True
    dynamic_on: bool = False
    append_output: list[str] = Field(default_factory=list)

    @field_validator("append_output")
    @classmethod
    def _two_run_times(cls, times: list[str]) -> list[str]:
        if times and len(times) != 2:
            raise ValueError("needs two run-folder times (start, end), e.g. ['Dec03_21-34-40', 'Dec03_21-34-41']")
        for value in times:
            try:
                time.strptime(value, RUN_FOLDER_TIME)
            except ValueError:
                raise ValueError(f"'{value}' is not a run-folder time like 'Dec03_21-34-40'") from None
        return times

    @field_validator("ops")
    @classmethod
    def _known_ops(cls, ops: list[str]) -> list[str]:
        unknown = [op for op in ops if op not in OPS]
        if unknown:
            raise ValueError(f"unknown op(s) {unknown}; known: {', '.join(OPS)}")
        if not ops:
            raise ValueError("must name at least one op")
        return ops


def load_monitor_config(path: str | Path) -> MonitorConfig:
    raw = read_config_file(path)
    try:
        config = MonitorConfig.model_validate(raw)
    except ValidationError as exc:
        raise config_error_from_validation(exc, path) from None
    if config.format == "tensorboard":
        from msprobe.core.monitor.tensorboard import require_tensorboard

        try:
            require_tensorboard()
        except UsageError as exc:
            raise ConfigError(str(exc), path=path, field="format") from None
    return config
