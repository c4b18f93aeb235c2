"""The reference's import path for csv2tb; the conversion is framework-free and lives in core."""

from msprobe.core.monitor.tensorboard import csv2tensorboard_by_step

__all__ = ["csv2tensorboard_by_step"]
