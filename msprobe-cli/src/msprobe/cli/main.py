"""The ``msprobe`` command: built-in commands plus whatever the plugins add.

``msprobe -f pytorch run_ut ...`` keeps the reference's spelling: ``-f``
chooses the framework, and framework commands come from that backend's
plugin. Without ``-f`` a command provided by exactly one installed backend
is used; several make ``-f`` necessary.
"""

from __future__ import annotations

import logging
import os
import sys
from typing import Any, NamedTuple

import click

from msprobe.core.errors import EXIT_BAD_INPUT, EXIT_INTERNAL, MsprobeError
from msprobe.core.messages import show_messages
from msprobe.core.plugins import get_registry
from msprobe.core.version import __version__

# The newest reference release renamed some commands; both spellings work.
COMMAND_ALIASES = {
    "acc_check": "run_ut",
    "multi_acc_check": "multi_run_ut",
    "graph_visualize": "graph",
}


class _Offer(NamedTuple):
    plugin: str
    framework: str | None  # the backend the command belongs to (``-f``), None for everyone's
    command: click.Command


def _offers() -> tuple[dict[str, click.Command], dict[str, list[_Offer]]]:
    """The built-in commands by name, and what the other plugins offer by name. A plugin's command named
    like a built-in one is hidden by it, and two plugins offering one name leave the first's in use; each
    such collision is warned about once, naming both commands."""
    registry = get_registry()
    builtins: dict[str, click.Command] = {}
    offered: dict[str, list[_Offer]] = {}
    for plugin, framework, command in registry.cli_commands():
        if registry.is_builtin(plugin):
            builtins.setdefault(command.name, command)
        else:
            offered.setdefault(command.name, []).append(_Offer(plugin, framework, command))
    for name, offers in offered.items():
        for offer in offers:
            if name in builtins:
                _warn_once(f"plugin '{offer.plugin}' adds a command '{name}', which the built-in '{name}' hides")
        shared = [offer.plugin for offer in offers if offer.framework is None]
        if len(shared) > 1:
            _warn_once(f"plugins {', '.join(shared)} each add a command '{name}': {shared[0]}'s is used")
    return builtins, offered


class MsprobeGroup(click.Group):
    """Resolves subcommands from the built-ins and the plugins, honouring ``-f``."""

    def list_commands(self, ctx: click.Context) -> list[str]:
        builtins, offered = _offers()
        framework = ctx.ensure_object(dict).get("framework")
        names = set(builtins)
        for name, offers in offered.items():
            if any(o.framework is None or framework is None or o.framework == framework for o in offers):
                names.add(name)
        return sorted(names)

    def get_command(self, ctx: click.Context, cmd_name: str) -> click.Command | None:
        name = COMMAND_ALIASES.get(cmd_name, cmd_name)
        builtins, offered = _offers()
        if name in builtins:
            return builtins[name]
        offers = offered.get(name, [])
        ctx.ensure_object(dict)["plugin"] = None
        framework = ctx.obj.get("framework")
        shared = [offer for offer in offers if offer.framework is None]
        if shared:
            ctx.obj["plugin"] = shared[0].plugin
            return shared[0].command
        if framework is not None:
            for offer in offers:
                if offer.framework == framework:
                    return offer.command
            if offers:
                owners = ", ".join(sorted({str(o.framework) for o in offers}))
                raise click.UsageError(f"'{name}' is not a {framework} command (it is offered for: {owners})")
            return None
        if len(offers) == 1:
            ctx.obj["framework"] = offers[0].framework
            return offers[0].command
        if len(offers) > 1:
            owners = ", ".join(sorted({str(o.framework) for o in offers}))
            raise click.UsageError(f"'{name}' exists for several frameworks ({owners}): choose one with -f")
        return None

    def main(self, *args: Any, standalone_mode: bool = True, **extra: Any) -> Any:
        """As click's, but a usage error is one line (the error, and where to read the usage) on stderr."""
        if not standalone_mode:
            return super().main(*args, standalone_mode=False, **extra)
        try:
            code = super().main(*args, standalone_mode=False, **extra)  # an exit code, or None when it finished
        except click.exceptions.NoArgsIsHelpError as exc:
            exc.show()
            sys.exit(exc.exit_code)
        except click.UsageError as exc:
            where = exc.ctx.command_path if exc.ctx is not None else "msprobe"
            click.echo(f"Error: {exc.format_message()} (see '{where} --help')", err=True)
            sys.exit(exc.exit_code)
        except click.ClickException as exc:
            exc.show()
            sys.exit(exc.exit_code)
        except click.exceptions.Abort:
            click.echo("Aborted!", err=True)
            sys.exit(1)
        sys.exit(code if isinstance(code, int) else 0)

    def invoke(self, ctx: click.Context) -> Any:
        try:
            super().invoke(ctx)
            return None  # finished: main() reads None as exit status 0
        except MsprobeError as exc:
            raise _exiting(click.ClickException(str(exc)), exc.exit_code) from None
        except (click.exceptions.Exit, click.ClickException, click.exceptions.Abort, SystemExit):
            raise
        except BrokenPipeError:  # `msprobe compare ... | head -1`: the reader has what it wanted
            _quiet_exit_on_closed_pipe()
        except OSError as exc:  # a full disk, a folder that may not be written: the file and why, one line
            if exc.errno is None or os.environ.get("MSPROBE_DEBUG"):
                raise
            where = f"{exc.filename}: " if exc.filename else ""
            raise _exiting(click.ClickException(f"{where}{exc.strerror}"), EXIT_BAD_INPUT) from None
        except Exception as exc:
            plugin = (ctx.obj or {}).get("plugin")
            if plugin is None or os.environ.get("MSPROBE_DEBUG"):
                raise
            # a third party's command failed: say whose, not "internal error" of msprobe
            failed = click.ClickException(f"plugin '{plugin}' failed: {exc.__class__.__name__}: {exc}")
            raise _exiting(failed, EXIT_INTERNAL) from None


EXIT_CLOSED_PIPE = 128 + 13  # as a process that SIGPIPE ended


def _quiet_exit_on_closed_pipe() -> None:
    """The output's reader went away: no message (it would go nowhere), and no second error when Python
    flushes the closed stdout at exit."""
    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
    except (OSError, ValueError):
        pass
    raise SystemExit(EXIT_CLOSED_PIPE)


def _exiting(error: click.ClickException, code: int) -> click.ClickException:
    error.exit_code = code
    return error


_WARNED: set[str] = set()
logger = logging.getLogger("msprobe.cli")


def _warn_once(message: str) -> None:
    if message not in _WARNED:
        _WARNED.add(message)
        logger.warning(message)


def _show_logging(verbose: bool | None = None) -> None:
    """One handler on the ``msprobe`` logger, installed before plugin discovery can say anything."""
    show_messages(None if verbose is None else logging.DEBUG if verbose else logging.WARNING)


def _choose_verbosity(_ctx: click.Context, _param: click.Parameter, value: bool) -> bool:
    _show_logging(value)
    return value


def _choose_framework(ctx: click.Context, _param: click.Parameter, value: str | None) -> str | None:
    ctx.ensure_object(dict)
    _show_logging()
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


@click.group(
    cls=MsprobeGroup,
    context_settings={"help_option_names": ["-h", "--help"]},
    epilog="mindstudio-probe 26.x's spellings work too: "
    + ", ".join(f"{alias} (= {name})" for alias, name in COMMAND_ALIASES.items())
    + ".",
)
@click.option(
    "--verbose",
    is_flag=True,
    is_eager=True,
    expose_value=False,
    callback=_choose_verbosity,
    help="Show debug logging, plugin discovery included.",
)
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
def cli() -> None:
    """msprobe: precision debugging for PyTorch and MindSpore training.

    Dump a run, compare two runs, re-run APIs in high precision, find
    overflows. `msprobe plugins` shows which backends are installed.
    """


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
        sys.exit(EXIT_INTERNAL)


if __name__ == "__main__":  # pragma: no cover
    main()
