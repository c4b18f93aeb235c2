"""Training-state monitor, the framework-neutral half: config, schedule, CSV files, anomaly rules.

A framework measures the tensors of a step and hands the core one table of
``(kind, name, micro_step, {op: value})`` rows per step; this module decides
which steps are collected, writes ``{kind}_{start}-{end}.csv`` files (the
reference's names and header: ``vpp_stage, name, step[, micro_step], *ops``)
and applies the anomaly rules.
"""

from msprobe.core.monitor.anomaly import AnomalyDetector
from msprobe.core.monitor.config import (
    OPS,
    OUTPUT_ENV,
    RUN_FOLDER_TIME,
    Alert,
    AlertRule,
    MonitorConfig,
    load_monitor_config,
)
from msprobe.core.monitor.output import MonitorOutput
from msprobe.core.monitor.schedule import Schedule
from msprobe.core.monitor.session import MonitorSession
from msprobe.core.monitor.switch import DYNAMIC_ENV, DynamicSwitch

__all__ = [
    "DYNAMIC_ENV",
    "OPS",
    "OUTPUT_ENV",
    "RUN_FOLDER_TIME",
    "Alert",
    "AlertRule",
    "AnomalyDetector",
    "DynamicSwitch",
    "MonitorConfig",
    "MonitorOutput",
    "MonitorSession",
    "Schedule",
    "load_monitor_config",
]
