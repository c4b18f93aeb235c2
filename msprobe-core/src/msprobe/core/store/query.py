"""``msprobe db query``: DuckDB SQL over a store, whose parts appear as the views ``stats`` and ``stacks``."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from msprobe.core.errors import DataFileError, UsageError
from msprobe.core.store import require
from msprobe.core.store.build import MANIFEST


def _quoted(text: str) -> str:
    return "'" + text.replace("'", "''") + "'"


def connect(store: str | Path) -> Any:
    """An in-memory DuckDB connection with the store's views; the Parquet files are only read."""
    duckdb = require("duckdb")
    store = Path(store).expanduser()
    if not (store / MANIFEST).is_file():
        raise DataFileError(store, f"not an msprobe store (no {MANIFEST}); make one with msprobe db build")
    connection = duckdb.connect()
    _read_only(connection, store, duckdb)
    if not any((store / "stacks").glob("step=*/rank=*/*.parquet")):  # monitor rows only: no stacks
        connection.execute("CREATE VIEW stacks AS SELECT NULL::BIGINT AS stack_id, NULL::VARCHAR AS stack WHERE false")
    for view in ("stats", "stacks"):
        if not any((store / view).glob("step=*/rank=*/*.parquet")):
            if view == "stats":
                raise DataFileError(store, "the store holds no statistics yet")
            continue
        files = _quoted(str(store / view / "step=*" / "rank=*" / "*.parquet"))
        options = "hive_partitioning = true, hive_types = {'step': BIGINT, 'rank': BIGINT}, union_by_name = true"
        select = "SELECT DISTINCT stack_id, stack" if view == "stacks" else "SELECT *"
        try:
            connection.execute(f"CREATE VIEW {view} AS {select} FROM read_parquet({files}, {options})")
        except duckdb.Error as exc:
            connection.close()
            raise _failure(store, exc) from None
    return connection


def _read_only(connection: Any, store: Path, duckdb: Any) -> None:
    """The store is read, and nothing else: no file outside it read or written (``COPY ... TO``,
    ``read_text('/etc/passwd')``), no extension installed or downloaded, and the settings locked so that a
    query cannot undo this."""
    try:
        connection.execute(f"SET allowed_directories = [{_quoted(str(store.resolve()))}]")
        connection.execute("SET autoinstall_known_extensions = false")
        connection.execute("SET autoload_known_extensions = false")
        connection.execute("SET enable_external_access = false")
        connection.execute("SET lock_configuration = true")
    except duckdb.Error as exc:
        connection.close()
        raise UsageError(f"msprobe db query needs a DuckDB that confines a query to the store ({exc})") from None


def _failure(store: Path, exc: Exception) -> Exception:
    """One line: a part damaged on disk (the next build repairs it), else the query's own mistake."""
    message = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
    if ".parquet" in message:
        return DataFileError(store, f"a part is damaged ({message}); run msprobe db build again to repair it")
    return UsageError(f"query failed: {message}")


def run_query(store: str | Path, sql: str) -> Any:
    """The query's result as a pandas DataFrame; a SQL error is one line naming the query."""
    duckdb = require("duckdb")
    connection = connect(store)
    try:
        return connection.execute(sql).df()
    except duckdb.Error as exc:
        raise _failure(Path(store), exc) from None
    finally:
        connection.close()
