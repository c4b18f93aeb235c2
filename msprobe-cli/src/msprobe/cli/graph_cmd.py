"""``msprobe graph`` (26.x: ``graph_visualize``): the model hierarchy of a run or a comparison."""

from __future__ import annotations

from pathlib import Path

import click

from msprobe.cli.options import (
    engine_of,
    engine_options,
    fuzzy_match_option,
    input_path_option,
    layer_mapping_option,
)


@click.command("graph")
@input_path_option("compare.json: npu_path, and bench_path to compare two runs.")
@click.option(
    "-o",
    "--output_path",
    "output_path",
    required=True,
    type=click.Path(file_okay=False, path_type=Path),
    help="Folder for the .vis files and the .html pages.",
)
@layer_mapping_option("YAML: layer names -> bench layer names.")
@click.option("-oc", "--overflow_check", is_flag=True, help="Mark each node's overflow level.")
@fuzzy_match_option
@click.option("-cs", "--complete_stack", is_flag=True, help="Keep the whole call stack of each node.")
@engine_options
def graph_command(
    input_path: Path,
    output_path: Path,
    layer_mapping: str | None,
    overflow_check: bool,
    fuzzy_match: bool,
    complete_stack: bool,
    engine: str,
    ray_address: str | None,
) -> None:
    """Build the module/API graph of a dump, or compare two; writes .vis and a self-contained .html. The
    graphs of a multi-step or multi-rank dump run on --engine."""
    from msprobe.core.graph.run import run_graph

    summaries = run_graph(
        input_path,
        output_path,
        layer_mapping,
        fuzzy_match,
        overflow_check,
        complete_stack,
        engine=engine_of(engine, ray_address),
    )
    for summary in summaries:
        click.echo(summary.line())
    pages = [str(f) for s in summaries for f in s.files if f.suffix == ".html"]
    click.echo(f"open in a browser: {', '.join(pages)}")


COMMANDS = [graph_command]
