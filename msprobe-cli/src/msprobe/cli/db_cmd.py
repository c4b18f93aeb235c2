"""``msprobe db build|query|trend`` and ``msprobe data2db`` (mindstudio-probe 26.x's spelling of the build)."""

from __future__ import annotations

from pathlib import Path

import click

from msprobe.cli.options import engine_of, engine_options

SHOWN_ROWS = 50


@click.group("db")
def db_group() -> None:
    """A Parquet store of every statistic of all steps and ranks, SQL over it, and trend pages."""


def _build(data: Path, store: Path, data_format: str, mapping: str | None, engine) -> None:
    from msprobe.core.store.build import build_store

    summary = build_store(data, store, data_format, engine, mapping)
    click.echo(summary.line())


@db_group.command("build")
@click.option(
    "-i",
    "--input_path",
    "data",
    required=True,
    type=click.Path(path_type=Path),
    help="Dump root (holding step{N} folders) or monitor output (holding {time}-rank{R} folders).",
)
@click.option(
    "-o",
    "--output_path",
    "store",
    required=True,
    type=click.Path(file_okay=False, path_type=Path),
    help="The store folder; an existing store gets only what is new or changed.",
)
@click.option(
    "--format",
    "data_format",
    type=click.Choice(["auto", "dump", "monitor"]),
    default="auto",
    show_default=True,
    help="What the input holds.",
)
@click.option("--mapping", type=click.Path(dir_okay=False), help="JSON of name text -> replacement (26.x's mapping).")
@click.option("-n", "--workers", type=click.IntRange(min=1), default=None, help="Local processes (default: CPUs).")
@engine_options
def build_command(data, store, data_format, mapping, workers, engine, ray_address) -> None:
    """Write the statistics of every step and rank as Parquet, partitioned by step and rank."""
    _build(data, store, data_format, mapping, engine_of(engine, ray_address, workers))


@db_group.command("query")
@click.argument("store", type=click.Path(path_type=Path))
@click.argument("sql")
@click.option("-o", "--output", type=click.Path(dir_okay=False, path_type=Path), help="Write the result as CSV.")
def query_command(store: Path, sql: str, output: Path | None) -> None:
    """Run DuckDB SQL over the store: the tables are `stats` (one row per tensor) and `stacks`."""
    import pandas as pd

    from msprobe.core.files import write_new_file
    from msprobe.core.spreadsheet import write_csv_table
    from msprobe.core.store.query import run_query

    table = run_query(store, sql)
    if output is not None:  # a cell that looks like a formula (=HYPERLINK(...)) is written as text
        write_new_file(output, lambda handle: write_csv_table(handle, table))
        click.echo(f"{len(table)} rows written to {output}")
        return
    with pd.option_context("display.width", 200, "display.max_columns", 30, "display.max_colwidth", 60):
        click.echo(table.head(SHOWN_ROWS).to_string(index=False))
    if len(table) > SHOWN_ROWS:
        click.echo(f"... {len(table)} rows; the first {SHOWN_ROWS} shown (-o FILE writes them all)")


@db_group.command("trend")
@click.argument("store", type=click.Path(path_type=Path))
@click.option(
    "-n",
    "--name",
    "pattern",
    default=".*",
    show_default=True,
    help="Regular expression over the entry names to look at.",
)
@click.option(
    "-s",
    "--statistic",
    "statistics",
    multiple=True,
    type=click.Choice(["max", "min", "mean", "norm"]),
    help="Statistic(s) to judge and draw (repeatable; default norm).",
)
@click.option(
    "--factor",
    type=float,
    default=10.0,
    show_default=True,
    help="A jump: a magnitude over FACTOR times its running median.",
)
@click.option(
    "--max-series",
    "max_series",
    type=click.IntRange(min=1),
    default=32,
    show_default=True,
    help="Tensors drawn on the page (the findings cover all matches).",
)
@click.option(
    "-o",
    "--output",
    type=click.Path(dir_okay=False, path_type=Path),
    default=Path("trend.html"),
    show_default=True,
    help="The page to write.",
)
def trend_command(store, pattern, statistics, factor, max_series, output) -> None:
    """Name the first step and rank where a statistic turns inf/nan or jumps, and write a trend page."""
    from msprobe.core.store.trend import write_trend

    summary = write_trend(store, output, pattern, tuple(statistics) or ("norm",), factor, max_series)
    for line in summary.lines():
        click.echo(line)
    click.echo(f"page: {summary.page} ({summary.drawn} of {summary.matched} matching tensors drawn)")


@click.command("data2db")
@click.option("--data", "data", required=True, type=click.Path(path_type=Path), help="Dump root or monitor output.")
@click.option(
    "--db",
    "store",
    required=True,
    type=click.Path(file_okay=False, path_type=Path),
    help="Output folder: here a Parquet store (msprobe db query reads it), not 26.x's SQLite file.",
)
@click.option("--format", "data_format", type=click.Choice(["auto", "dump", "monitor"]), default="auto")
@click.option("--mapping", type=click.Path(dir_okay=False), help="JSON of name text -> replacement.")
@click.option(
    "--micro_step",
    "micro_step",
    default=None,
    hidden=True,
    help="Accepted for 26.x scripts; the store keeps monitor micro-steps in `arg`.",
)
@click.option("--process_num", "workers", type=click.IntRange(min=1), default=1, show_default=True)
@engine_options
def data2db_command(data, store, data_format, mapping, micro_step, workers, engine, ray_address) -> None:
    """mindstudio-probe 26.x's name for `msprobe db build`."""
    _build(data, store, data_format, mapping, engine_of(engine, ray_address, workers))


COMMANDS = [db_group, data2db_command]
