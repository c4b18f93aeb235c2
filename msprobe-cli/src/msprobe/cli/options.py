"""Options several commands share, spelled once: the reference's -i, -f and -lm."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import click

from msprobe.core.jobs import click_options as engine_options  # shared with the backends' commands
from msprobe.core.jobs import engine_of


def input_path_option(help_text: str) -> Any:
    return click.option(
        "-i", "--input_path", "input_path", required=True, type=click.Path(path_type=Path), help=help_text
    )


def layer_mapping_option(help_text: str) -> Any:
    return click.option("-lm", "--layer_mapping", type=click.Path(dir_okay=False), help=help_text)


fuzzy_match_option = click.option(
    "-f", "--fuzzy_match", is_flag=True, help="Match APIs that differ only in call count, by order."
)

__all__ = ["engine_of", "engine_options", "fuzzy_match_option", "input_path_option", "layer_mapping_option"]
