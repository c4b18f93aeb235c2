"""The built-in plugin ``builtin-commands``: the CLI's own commands, through the hook a third party uses.

The command modules are imported only when the hook is called (by the CLI), so
a training job that discovers plugins does not pay for them.
"""

from __future__ import annotations

import importlib
from typing import Any

from msprobe.core.hookspecs import hookimpl

COMMAND_MODULES = (
    "plugins_cmd",
    "config_cmd",
    "compare_cmd",
    "parse_cmd",
    "monitor_cmd",
    "graph_cmd",
    "recover_cmd",
    "check_cmd",
    "db_cmd",
    "run_cmd",
    "generation_cmd",
)


@hookimpl
def msprobe_cli_commands() -> list[Any]:
    """Each module lists its commands in ``COMMANDS``."""
    commands: list[Any] = []
    for module in COMMAND_MODULES:
        commands.extend(importlib.import_module(f"msprobe.cli.{module}").COMMANDS)
    return commands
