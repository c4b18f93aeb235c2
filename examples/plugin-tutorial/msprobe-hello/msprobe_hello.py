"""An msprobe command: `msprobe hello` greets and says which frameworks msprobe can drive here."""

import click

from msprobe.core.hookspecs import hookimpl
from msprobe.core.plugins import get_registry


@click.command("hello")
@click.option("--name", default="world", show_default=True, help="Whom to greet.")
def hello(name: str) -> None:
    """Greet, and list the installed backends."""
    backends = ", ".join(sorted(get_registry().backends())) or "none"
    click.echo(f"Hello, {name}! Installed backends: {backends}")


@hookimpl
def msprobe_cli_commands() -> list[click.Command]:
    return [hello]
