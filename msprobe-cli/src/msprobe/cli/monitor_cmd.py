"""``msprobe monitor csv2tb``: the monitor's CSV output as TensorBoard files."""

from __future__ import annotations

from pathlib import Path

import click


@click.group("monitor")
def monitor_group() -> None:
    """Training-state monitor output tools."""


@monitor_group.command("csv2tb")
@click.option(
    "-m",
    "--monitor_path",
    "monitor_path",
    required=True,
    type=click.Path(path_type=Path),
    help="MONITOR_OUTPUT_DIR of the run: holds the {time}-rank{R} folders.",
)
@click.option("--time_start", required=True, help="First run folder time to convert, e.g. Dec03_21-34-40.")
@click.option("--time_end", required=True, help="Last run folder time to convert (inclusive).")
@click.option("-n", "--process_num", default=1, show_default=True, type=click.IntRange(min=1), help="Processes.")
@click.option(
    "-t",
    "--data_type",
    "data_types",
    multiple=True,
    help="Only these CSV kinds (repeatable): actv, actv_grad, exp_avg, exp_avg_sq, grad_reduced, param, ...",
)
@click.option("-o", "--output_dirpath", type=click.Path(file_okay=False, path_type=Path), default=None)
def csv2tb_command(
    monitor_path: Path,
    time_start: str,
    time_end: str,
    process_num: int,
    data_types: tuple[str, ...],
    output_dirpath: Path | None,
) -> None:
    """Convert monitor CSV files to TensorBoard event files, one folder per run and rank."""
    from msprobe.core.monitor.tensorboard import csv2tensorboard_by_step

    output = csv2tensorboard_by_step(
        monitor_path, time_start, time_end, process_num, list(data_types) or None, output_dirpath
    )
    click.echo(f"tensorboard files: {output} (view with: tensorboard --logdir {output})")


COMMANDS = [monitor_group]
