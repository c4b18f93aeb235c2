"""The old name of :mod:`msprobe.core.graph.run`, kept for the scripts that import it."""

from msprobe.core.graph.run import (  # noqa: F401
    GraphInput,
    GraphSummary,
    build_one,
    compare_one,
    read_graph_input,
    run_graph,
    write_answered_page,
)
