"""A columnar store of every statistic of a run: all steps and ranks of dumps and monitor CSVs, one row per
tensor, as a Parquet dataset partitioned by step and rank (``msprobe db build``), queried with DuckDB SQL
(``msprobe db query``) and drawn as trends over steps and ranks (``msprobe db trend``).

pyarrow and DuckDB are the optional extra ``msprobe-core[db]``, imported only here.
"""

from __future__ import annotations

from typing import Any

from msprobe.core.errors import UsageError


def require(module: str) -> Any:
    """pyarrow or duckdb, or one line saying how to get them."""
    import importlib

    try:
        return importlib.import_module(module)
    except ImportError:
        package = module.partition(".")[0]
        raise UsageError(f"msprobe db needs {package}: pip install 'msprobe-core[db]'") from None
