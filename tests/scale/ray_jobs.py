"""Job functions the Ray tests send to the cluster (its workers import this module: tests/scale is on their path)."""

from __future__ import annotations

import time
from pathlib import Path


def square_on_a_node(item: tuple[int, str]) -> tuple[int, str]:
    """Leave a mark naming the node that ran the item, take a while (long enough for a kill to land mid-task),
    answer the square."""
    import ray

    number, marks = item
    node = ray.get_runtime_context().get_node_id()
    Path(marks, f"{node}-{number}").touch()
    time.sleep(1.0)
    return number * number, node
