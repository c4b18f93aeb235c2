"""The old name of :mod:`msprobe.core.compare.run`, kept for the scripts that import it."""

from msprobe.core.compare.run import (  # noqa: F401
    CompareInput,
    CompareSummary,
    check_tensor_readers,
    collector_paused,
    compare,
    compare_distributed,
    compare_pair,
    diagnose_across,
    diagnose_compare_json,
    overall_line,
    read_compare_json,
    registered_metrics,
    run_compare_json,
    stack_source,
    tensor_readers,
    write_first_divergence,
)
