"""The monitor's anomaly rule (AnomalyTurbulence) and its non-finite check."""

from __future__ import annotations

import logging
import math

from msprobe.core.monitor.config import Alert

logger = logging.getLogger(__name__)


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
            if abs(value - mean) > threshold * abs(mean) and abs(mean) > 0:
                reason = f"{op} {value:.6g} is more than {threshold} away from its mean {mean:.6g}"
        self.history[key] = ((mean * count + value) / (count + 1), count + 1)
        return reason
