"""summary_mode resolved once: what each task and mode's summaries hold, written out by hand."""

import pytest

from msprobe.core.config import DebuggerConfig
from msprobe.core.dump.summarizer import SummaryPlan, summary_plan


@pytest.mark.parametrize(
    ("task", "mode", "plan"),
    [
        ("statistics", "statistics", SummaryPlan(statistics=True, checksum=None, files=False)),
        ("statistics", "md5", SummaryPlan(statistics=True, checksum="crc32", files=False)),
        ("statistics", "xor", SummaryPlan(statistics=False, checksum="xor", files=False)),  # xor stands in
        ("tensor", "statistics", SummaryPlan(statistics=True, checksum=None, files=True)),
        ("tensor", "md5", SummaryPlan(statistics=True, checksum="crc32", files=True)),
        ("overflow_check", "statistics", SummaryPlan(statistics=True, checksum=None, files=False)),
        ("structure", "statistics", SummaryPlan(statistics=False, checksum=None, files=False)),
    ],
)
def test_each_task_and_mode(task, mode, plan):
    assert summary_plan(task, mode) == plan
    assert plan.caches == (plan.statistics or plan.checksum is not None)


def test_the_config_resolves_the_tensor_sections_own_mode():
    config = DebuggerConfig.model_validate(
        {
            "task": "tensor",
            "dump_path": "d",
            "statistics": {"summary_mode": "statistics"},
            "tensor": {"summary_mode": "md5"},
        }
    )
    assert config.summary_plan == SummaryPlan(statistics=True, checksum="crc32", files=True)
    config = DebuggerConfig.model_validate(
        {"task": "statistics", "dump_path": "d", "statistics": {"summary_mode": "xor"}}
    )
    assert config.summary_plan.checksum == "xor" and not config.summary_plan.statistics
