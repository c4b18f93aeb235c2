"""The statistics distance the diagnosis and the graph page share, on hand-derived cases."""

from __future__ import annotations

import math

import pytest

from msprobe.core.distance import statistics_distance

NAN, INF = math.nan, math.inf


@pytest.mark.parametrize(
    ("ours", "theirs", "count", "expected"),
    [
        ((1.0, -1.0, 0.0, 4.0), (1.0, -1.0, 0.0, 4.0), 16, 0.0),  # the same statistics
        # a mean near zero is measured against the RMS (norm 4 over 16 elements: 1), not against itself
        ((1.0, -1.0, 1e-3, 4.0), (1.0, -1.0, 0.0, 4.0), 16, 1e-3),
        ((2.0, -1.0, 0.0, 4.0), (1.0, -1.0, 0.0, 4.0), 16, 1.0),  # Max 2 against 1: |2 - 1| / max(1, 1)
        ((30.0, -1.0, 0.0, 40.0), (20.0, -1.0, 0.0, 40.0), 4, 0.5),  # |30 - 20| / max(20, 40 / 2)
        ((INF, -1.0, 0.0, 4.0), (1.0, -1.0, 0.0, 4.0), 16, INF),  # inf where the benchmark is finite
        ((NAN, -1.0, 0.0, 4.0), (NAN, -1.0, 0.0, 4.0), 16, 0.0),  # nan on both sides: the same
        ((1e-9, 0.0, 0.0, 0.0), (0.0, 0.0, 0.0, 0.0), 8, INF),  # any change of a tensor of zeros
        # a partial sum, only its mean known: |1 - 1.5| / max(1.5, 2 / 2)
        ((None, None, 1.0, None), (None, None, 1.5, 2.0), 4, 1 / 3),
        ((None, None, None, None), (1.0, 1.0, 1.0, 1.0), 1, None),  # nothing known on both sides
    ],
)
def test_statistics_distance(ours, theirs, count, expected):
    found = statistics_distance(ours, theirs, count)
    if expected is None or math.isinf(expected):
        assert found == expected
    else:
        assert found == pytest.approx(expected, rel=1e-12, abs=1e-15)


def test_the_graph_page_and_the_diagnosis_measure_alike():
    """Both surfaces read the one rule: a nan against a finite value is as far as a value can be on both (the
    graph page's index stops at 1)."""
    from msprobe.core.compare.rows import Row
    from msprobe.core.diagnosis.calls import Value
    from msprobe.core.diagnosis.values import ValueComparer
    from msprobe.core.graph.compare import node_index
    from msprobe.core.graph.model import Node

    stats = {"ours": (NAN, -1.0, 0.0, 4.0), "theirs": (1.0, -1.0, 0.0, 4.0)}
    values = {side: Value("output.0", True, "float32", (16,), value) for side, value in stats.items()}
    assert ValueComparer().error(values["ours"], values["theirs"]) == INF
    rows = {side: Row("x.output.0", "x", "float32", [16], value, None, None, "output") for side, value in stats.items()}
    node = Node.__new__(Node)
    node.inputs, node.outputs = [], [rows["ours"]]
    assert node_index("statistics", node, {}, {"x.output.0": rows["theirs"]}) == 1
