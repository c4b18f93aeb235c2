"""``msprobe recover``: a killed step's journal made into ordinary dump files."""

from __future__ import annotations

from pathlib import Path

import click

from msprobe.core.errors import DataFileError


@click.command("recover")
@click.argument("step_dir", type=click.Path(path_type=Path))
def recover_command(step_dir: Path) -> None:
    """Write dump.json, stack.json and construct.json from the journal of every killed rank under STEP_DIR.

    compare, run_ut, parse and graph read a journal as it is; recover makes the folder an ordinary dump for
    other tools (and for the reference).
    """
    from msprobe.core.dump.reader import journal_folders, recover

    if not step_dir.is_dir():
        raise DataFileError(step_dir, "is not a folder")
    folders = journal_folders(step_dir)
    if not folders:
        raise DataFileError(step_dir, "holds no journal of a killed step (every folder has its dump.json)")
    for folder in folders:
        click.echo(f"{folder}: {recover(folder)} entries recovered")
    click.echo(f"recovered {len(folders)} folder(s)")


COMMANDS = [recover_command]
