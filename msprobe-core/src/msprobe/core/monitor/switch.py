"""Switching the monitor on and off while training runs (DYNAMIC_MONITOR)."""

from __future__ import annotations

import json
import logging
import os
from pathlib import Path

from msprobe.core.config import read_config_file
from msprobe.core.errors import MsprobeError
from msprobe.core.files import write_new_file
from msprobe.core.monitor.config import MonitorConfig, load_monitor_config

logger = logging.getLogger(__name__)

DYNAMIC_ENV = "DYNAMIC_MONITOR"


class DynamicSwitch:
    """Dynamic start/stop: with DYNAMIC_MONITOR=True, editing the config turns collection on and off.

    Collection starts when ``dynamic_on`` is true (the first time), or when the
    config file is newer than last seen and ``dynamic_on`` is true; after
    ``collect_times`` collected steps it stops and writes ``dynamic_on: false``
    back, so the next edit can start it again.
    """

    def __init__(self, path: str | Path):
        self.path = Path(path)
        self.enabled = os.environ.get(DYNAMIC_ENV, "").lower() == "true"
        self.seen_mtime = 0.0
        self.started_once = False

    def poll(self) -> MonitorConfig | None:
        """A config to (re)start collection with, or None."""
        if not self.enabled:
            return None
        try:
            mtime = self.path.stat().st_mtime
        except OSError:
            return None
        if self.started_once and mtime <= self.seen_mtime:
            return None
        self.seen_mtime = mtime
        try:
            config = load_monitor_config(self.path)
        except MsprobeError as exc:  # a bad edit must not stop the training; the next save is read again
            logger.warning("monitor: %s; keeping the current settings", exc)
            return None
        if not config.dynamic_on:
            return None
        self.started_once = True
        return config

    def switch_off(self) -> None:
        raw = read_config_file(self.path)
        raw["dynamic_on"] = False
        text = json.dumps(raw, indent=4).encode()
        write_new_file(self.path, lambda handle: handle.write(text))
        self.seen_mtime = self.path.stat().st_mtime
