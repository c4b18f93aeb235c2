"""An msprobe plugin kept outside the msprobe packages, as a third party would write it."""

from __future__ import annotations

import click
import numpy as np

from msprobe.core.backend import CompareMetric
from msprobe.core.hookspecs import hookimpl


def sign_flip_ratio(actual: np.ndarray, expected: np.ndarray) -> float:
    """Share of elements whose sign differs; NaN when the shapes differ or are empty."""
    actual = np.asarray(actual, dtype=np.float64)
    expected = np.asarray(expected, dtype=np.float64)
    if actual.shape != expected.shape or actual.size == 0:
        return float("nan")
    return float(np.mean(np.sign(actual) != np.sign(expected)))


@hookimpl
def msprobe_compare_metrics() -> list[CompareMetric]:
    return [CompareMetric("SignFlipRatio", sign_flip_ratio, "share of elements whose sign flipped")]


@click.command("sign-flips")
@click.argument("actual", type=click.Path(exists=True, dir_okay=False))
@click.argument("expected", type=click.Path(exists=True, dir_okay=False))
def sign_flips_command(actual: str, expected: str) -> None:
    """Print the share of elements whose sign differs between two .npy files."""
    ratio = sign_flip_ratio(np.load(actual, allow_pickle=False), np.load(expected, allow_pickle=False))
    click.echo(f"SignFlipRatio: {ratio:.6f}")


@hookimpl
def msprobe_cli_commands() -> list[click.Command]:
    return [sign_flips_command]
