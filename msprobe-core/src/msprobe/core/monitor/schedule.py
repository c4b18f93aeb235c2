"""Which steps the monitor collects."""

from __future__ import annotations

import logging

from msprobe.core.monitor.config import MonitorConfig

logger = logging.getLogger(__name__)


class Schedule:
    """start_step, step_interval, collect_times: which steps are collected."""

    def __init__(self, config: MonitorConfig, start_iteration: int = 0):
        self.config = config
        self.step = start_iteration
        self.collected = 0

    def collecting(self) -> bool:
        config = self.config
        if self.step < config.start_step or self.collected >= config.collect_times:
            return False
        return (self.step - config.start_step) % config.step_interval == 0
