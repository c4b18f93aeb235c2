"""The ``msprobe`` command: built-in commands plus whatever the plugins add.

``msprobe -f pytorch run_ut ...`` keeps the reference's spelling: ``-f``
chooses the framework, and framework commands come from that backend's
plugin. Without ``-f`` a command provided by exactly one installed backend
is used; several make ``-f`` necessary.
"""

from __future__ import annotations

import importlib
import logging
import os
import sys
from typing import Any

import click

from msprobe.core.errors import MsprobeError
from msprobe.core.plugins import get_registry
from msprobe.core.version import __version__

# The newest reference release renamed some commands; both spellings work.
COMMAND_ALIASES = {
    "acc_check": "run_ut",
    "multi_acc_check": "multi_run_ut",
    "graph_visualize": "graph",
}


BUILTIN_MODULES = ("plugins_cmd", "config_cmd", "compare_cmd", "parse_cmd", "monitor_cmd", "graph_cmd", "recover_cmd")


def _builtin_commands() -> dict[str, click.Command]:
    """The CLI's own commands: each module lists its commands in COMMANDS."""
    commands: dict[str, click.Command] = {}
    for module in BUILTIN_MODULES:
        for command in importlib.import_module(f"msprobe.cli.{module}").COMMANDS:
            commands[command.name] = command
    return commands


class MsprobeGroup(click.Group):
    """Resolves subcommands from the built-ins and the plugins, honouring ``-f``."""

    def list_commands(self, ctx: click.Context) -> list[str]:
        names = set(_builtin_commands())
        framework = ctx.ensure_object(dict).get("framework")
        for _plugin, owner, command in get_registry().cli_commands():
            if owner is None or framework is None or owner == framework:
                names.add(command.name)
        return sorted(names)

    def get_command(self, ctx: click.Context, cmd_name: str) -> click.Command | None:
        name = COMMAND_ALIASES.get(cmd_name, cmd_name)
        builtins = _builtin_commands()
        offered = [(plugin, owner, command) for plugin, owner, command in get_registry().cli_commands()]
        offered = [entry for entry in offered if entry[2].name == name]
        if name in builtins:
            for plugin, owner, _command in offered:
                if owner is None:  # a backend's commands are its own (-f); a plain plugin's cannot replace ours
                    _warn_once(f"plugin '{plugin}' adds a command '{name}', which the built-in one hides")
            return builtins[name]
        ctx.ensure_object(dict)["plugin"] = None
        framework = ctx.obj.get("framework")
        candidates = [(owner, command) for _plugin, owner, command in offered]
        shared = [(plugin, command) for plugin, owner, command in offered if owner is None]
        if shared:
            if len(shared) > 1:
                names = ", ".join(plugin for plugin, _ in shared)
                _warn_once(f"plugins {names} each add a command '{name}': {shared[0][0]}'s is used")
            ctx.obj["plugin"] = shared[0][0]
            return shared[0][1]
        if framework is not None:
            for owner, command in candidates:
                if owner == framework:
                    return command
            if candidates:
                owners = ", ".join(sorted({owner for owner, _ in candidates}))
                raise click.UsageError(f"'{name}' is not a {framework} command (it is offered for: {owners})")
            return None
        if len(candidates) == 1:
            ctx.obj["framework"] = candidates[0][0]
            return candidates[0][1]
        if len(candidates) > 1:
            owners = ", ".join(sorted({owner for owner, _ in candidates}))
            raise click.UsageError(f"'{name}' exists for several frameworks ({owners}): choose one with -f")
        return None

    def invoke(self, ctx: click.Context) -> Any:
        try:
            return super().invoke(ctx)
        except MsprobeError as exc:
            raise click.ClickException(str(exc)) from None
        except (click.exceptions.Exit, click.ClickException, click.exceptions.Abort, SystemExit):
            raise
        except Exception as exc:
            plugin = (ctx.obj or {}).get("plugin")
            if plugin is None or os.environ.get("MSPROBE_DEBUG"):
                raise
            # a third party's command failed: say whose, not "internal error" of msprobe
            raise click.ClickException(f"plugin '{plugin}' failed: {exc.__class__.__name__}: {exc}") from None


_WARNED: set[str] = set()


def _warn_once(message: str) -> None:
    if message not in _WARNED:
        _WARNED.add(message)
        click.echo(f"warning: {message}", err=True)


def _choose_framework(ctx: click.Context, _param: click.Parameter, value: str | None) -> str | None:
    ctx.ensure_object(dict)
    if value is None:
        ctx.obj["framework"] = None
        return None
    registry = get_registry()
    try:
        backend = registry.find_backend(value)
    except MsprobeError as exc:
        raise click.BadParameter(str(exc)) from None
    ctx.obj["framework"] = backend.name
    return backend.name


@click.group(cls=MsprobeGroup, context_settings={"help_option_names": ["-h", "--help"]})
@click.option(
    "-f",
    "--framework",
    callback=_choose_framework,
    is_eager=True,
    expose_value=False,
    metavar="pytorch|mindspore",
    help="Framework whose commands to use; needed only when several backends offer the same command.",
)
@click.version_option(__version__, "--version", "-v", prog_name="msprobe", message="%(prog)s %(version)s")
@click.option("--verbose", is_flag=True, help="Show debug logging.")
def cli(verbose: bool) -> None:
    """msprobe: precision debugging for PyTorch and MindSpore training.

    Dump a run, compare two runs, re-run APIs in high precision, find
    overflows. `msprobe plugins` shows which backends are installed.
    """
    logging.basicConfig(level=logging.DEBUG if verbose else logging.WARNING, format="msprobe: %(message)s")


def main(argv: list[str] | None = None) -> None:
    """Console entry point: user errors are one line, never a traceback."""
    try:
        cli.main(args=argv, prog_name="msprobe", standalone_mode=True)
    except MsprobeError as exc:  # raised outside a command's invoke (e.g. while resolving)
        click.echo(f"Error: {exc}", err=True)
        sys.exit(exc.exit_code)
    except Exception as exc:  # a bug: keep the message short unless asked for more
        if os.environ.get("MSPROBE_DEBUG"):
            raise
        click.echo(
            f"Error: internal error {exc.__class__.__name__}: {exc} (set MSPROBE_DEBUG=1 for the traceback)", err=True
        )
        sys.exit(3)


if __name__ == "__main__":  # pragma: no cover
    main()
