"""What docs/cli.md must say about the command line this environment has: every command, every subcommand
and every option of each (its short or long spelling). Run by the core session (the framework-free
commands) and the torch session (the backend's commands too)."""

from __future__ import annotations

import re
from pathlib import Path

import click

CLI_PAGE = Path(__file__).resolve().parents[1] / "docs" / "cli.md"
PLUGINS_PAGE = CLI_PAGE.with_name("plugins.md")
SPELLINGS = ("msprobe {}", "msprobe -f pytorch {}", "msprobe -f mindspore {}")


def _about(page: str, command: str) -> str:
    """The parts of the page about ``command``: its table rows, and the paragraphs naming it in backticks."""
    rows = [line for line in page.splitlines() if any(f"`{s.format(command)}" in line for s in SPELLINGS)]
    paragraphs = [block for block in page.split("\n\n") if f"`{command}`" in block or f"`{command} (" in block]
    return "\n".join(rows + paragraphs)


def undocumented() -> list[str]:
    """What `msprobe --help` and every command's --help show and docs/cli.md does not say about that command."""
    from msprobe.cli.main import cli

    page = CLI_PAGE.read_text()
    context = click.Context(cli)
    missing = []
    for name in cli.list_commands(context):
        command = cli.get_command(context, name)
        commands = [(name, command)]
        if isinstance(command, click.Group):
            commands += [(f"{name} {sub}", command.get_command(context, sub)) for sub in command.list_commands(context)]
        for full, each in commands:
            about = _about(page, full)
            if not about:
                missing.append(f"command `msprobe {full}`")
                continue
            for option in each.params:
                if isinstance(option, click.Option) and not option.hidden and option.name != "help":
                    if not any(re.search(rf"(?<![\w-]){re.escape(o)}(?![\w-])", about) for o in option.opts):
                        missing.append(f"option {'/'.join(option.opts)} of `msprobe {full}`")
    return missing


def plugins_undocumented() -> list[str]:
    """The lines `msprobe plugins` prints for the built-in plugins and the installed backends that the sample
    in docs/plugins.md lacks."""
    from click.testing import CliRunner

    from msprobe.cli.main import cli

    page = PLUGINS_PAGE.read_text()
    sample = page[page.index("$ msprobe plugins") :].split("```", 1)[0].splitlines()
    shown, ours = CliRunner().invoke(cli, ["plugins"]).output.splitlines(), False
    missing = []
    for line in shown:
        if not line.startswith(" "):
            ours = line.startswith("builtin-") or "(backend, msprobe-" in line
        if ours and line not in sample:
            missing.append(line)
    return missing
