"""The monitor's anomaly rule (AnomalyTurbulence) and its non-finite check."""

from __future__ import annotations

import logging
import math

from msprobe.core.monitor.config import Alert

logger = logging.getLogger(__name__)


def turbulent(value: float, mean: float, count: int, threshold: float) -> bool:
    """AnomalyTurbulence's test, the one rule of a value out of its series (the monitor's and the flight
    recorder's loss trigger): more than ``threshold`` (relative) away from the running mean of the ``count``
    values before it. A first value, or a mean of zero, has nothing to be measured against."""
    return count > 0 and mean != 0 and abs(value - mean) > threshold * abs(mean)


class AnomalyDetector:
    """AnomalyTurbulence: a value more than ``threshold`` (relative) away from its running mean; inf/nan always."""

    def __init__(self, alert: Alert):
        self.thresholds = [rule.args.get("threshold", 0.5) for rule in alert.rules]
        self.history: dict[tuple[str, str, str], tuple[float, int]] = {}

    def check(self, kind: str, name: str, op: str, value: float) -> str | None:
        if not math.isfinite(value) or (op == "nans" and value > 0):
            return f"{op} is {value}"
        if not self.thresholds:  # no rule: only non-finite values count, no history to keep
            return None
        key = (kind, name, op)
        mean, count = self.history.get(key, (0.0, 0))
        reason = None
        if count and self.thresholds and op not in ("nans", "zeros"):
            threshold = min(self.thresholds)
            if turbulent(value, mean, count, threshold):
                reason = f"{op} {value:.6g} is more than {threshold} away from its mean {mean:.6g}"
        self.history[key] = ((mean * count + value) / (count + 1), count + 1)
        return reason
