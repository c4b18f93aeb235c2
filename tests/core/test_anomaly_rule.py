"""AnomalyTurbulence, written once: the monitor's alert and the flight recorder's loss trigger both use it.
Expected values derived by hand from the rule: |value - mean| > threshold * |mean|."""

from __future__ import annotations

import math

import pytest

from msprobe.core.monitor.anomaly import AnomalyDetector, turbulent
from msprobe.core.monitor.config import Alert
from msprobe.core.recording.flight import LossRule


@pytest.mark.parametrize(
    ("value", "mean", "count", "expected"),
    [
        (1.6, 1.0, 3, True),  # 0.6 away from 1.0, over half of it
        (1.5, 1.0, 3, False),  # exactly half: not more than the threshold
        (0.4, 1.0, 3, True),  # below the mean counts the same
        (-1.6, -1.0, 3, True),  # a negative mean is measured by its size
        (9.0, 1.0, 0, False),  # no value before it
        (9.0, 0.0, 3, False),  # a mean of zero: nothing to measure against
    ],
)
def test_turbulent(value, mean, count, expected):
    assert turbulent(value, mean, count, 0.5) is expected


LOSSES = [1.0, 1.0, 1.0, 5.0, 5.0, 1.0, math.nan]


def test_the_flight_recorder_keeps_a_spike_out_of_the_mean_and_reports_one_event():
    rule = LossRule(0.5)
    reports = [rule.check(value) for value in LOSSES]
    # 5.0 is flagged once (the second is the same event, and the mean stays 1.0); a nan always is
    assert [index for index, reason in enumerate(reports) if reason] == [3, 6]
    assert "away from its mean 1" in reports[3] and reports[6] == "loss is nan"


def test_the_monitor_reports_every_value_out_of_its_series():
    detector = AnomalyDetector(Alert.model_validate({"rules": [{"rule_name": "AnomalyTurbulence"}]}))
    reports = [detector.check("loss", "loss", "value", value) for value in LOSSES]
    # the monitor's mean takes the spike in: (1 + 1 + 1 + 5) / 4 = 2, and 5 is still over 1.5 away from it;
    # then 1.0 against (8 + 5) / 5 = 2.6 is 1.6 away, over 1.3
    assert [index for index, reason in enumerate(reports) if reason] == [3, 4, 5, 6]
