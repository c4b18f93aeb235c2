"""``msprobe compare``: the reference's spelling, plus a one-line verdict per rank."""

from __future__ import annotations

from pathlib import Path

import click


@click.command("compare")
@click.option("-i", "--input_path", "input_path", required=True, type=click.Path(path_type=Path),
              help="compare.json naming npu_path and bench_path.")  # fmt: skip
@click.option("-o", "--output_path", "output_path", default="./output", show_default=True,
              type=click.Path(file_okay=False, path_type=Path), help="Folder for the result files.")  # fmt: skip
@click.option("-s", "--stack_mode", is_flag=True, help="Add the NPU_Stack_Info column.")
@click.option("-c", "--compare_only", is_flag=True, help="Skip the advisor.")
@click.option("-f", "--fuzzy_match", is_flag=True, help="Match APIs that differ only in call count, by order.")
def compare_command(
    input_path: Path, output_path: Path, stack_mode: bool, compare_only: bool, fuzzy_match: bool
) -> None:
    """Compare two dumps (statistics, tensor or md5 mode, picked from the dumps)."""
    from msprobe.core.compare.api import run_compare_json

    summaries = run_compare_json(input_path, output_path, stack_mode, compare_only, fuzzy_match)
    for summary in summaries:
        if summary.advice is not None and summary.advice.node:
            click.echo(summary.advice.text())
        click.echo(summary.line())
    files = [str(f) for s in summaries for f in s.files]
    click.echo(f"results: {', '.join(files)}")
    if any(s.verdict != "PASS" for s in summaries):
        raise SystemExit(1)
