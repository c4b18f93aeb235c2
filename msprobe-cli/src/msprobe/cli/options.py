"""Options several commands share, spelled once: the reference's -i, -f and -lm."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import click


def input_path_option(help_text: str) -> Any:
    return click.option(
        "-i", "--input_path", "input_path", required=True, type=click.Path(path_type=Path), help=help_text
    )


def layer_mapping_option(help_text: str) -> Any:
    return click.option("-lm", "--layer_mapping", type=click.Path(dir_okay=False), help=help_text)


fuzzy_match_option = click.option(
    "-f", "--fuzzy_match", is_flag=True, help="Match APIs that differ only in call count, by order."
)


def engine_options(function: Any) -> Any:
    """``--engine local|ray`` and ``--ray-address``; the command turns them into an Engine with ``engine_of``."""
    function = click.option(
        "--ray-address",
        "ray_address",
        default=None,
        metavar="ADDRESS",
        help="Ray cluster to join, host:port (default: RAY_ADDRESS, else a cluster started on this machine).",
    )(function)
    return click.option(
        "--engine",
        "engine",
        type=click.Choice(["local", "ray"]),
        default="local",
        show_default=True,
        help="Where the jobs run: this machine's processes, or a Ray cluster (pip install 'msprobe-core[ray]').",
    )(function)


def engine_of(engine: str, ray_address: str | None, workers: int | None = None) -> Any:
    from msprobe.core.jobs import Engine

    return Engine(engine, workers, ray_address)
