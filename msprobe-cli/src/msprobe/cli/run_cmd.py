"""``msprobe run``: a training command run with the dump on, the script unchanged."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import click

from msprobe.core.errors import BackendError


@click.command(
    "run", context_settings={"ignore_unknown_options": True, "allow_interspersed_args": False}
)  # fmt: skip
@click.option(
    "-c", "--config", "config_path", required=True, type=click.Path(path_type=Path),
    help="The config.json every process of the job dumps with.",
)  # fmt: skip
@click.argument("command", nargs=-1, required=True, type=click.UNPROCESSED)
@click.pass_context
def run_command(ctx: click.Context, config_path: Path, command: tuple[str, ...]) -> None:
    """Run COMMAND (``python train.py ...``, ``torchrun ...``) with the dump on in each of its processes.

    Each dump step runs from the model's first call to the next ``optimizer.step()``, and the dump ends when
    the process exits: no start(), stop() or step() in the script. Levels L0 and mix dump the first module
    the script calls. COMMAND's exit status is msprobe run's.
    """
    from msprobe.core.autostart import job_environment
    from msprobe.core.config import dump_path_problem, load_config
    from msprobe.core.errors import ConfigError
    from msprobe.core.plugins import get_registry

    config = load_config(str(config_path))  # a bad config stops here, before the job starts
    problem = dump_path_problem(config.dump_path)
    if problem:  # each process would find it so, and train on without a dump
        raise ConfigError(problem, config_path, "dump_path")
    backends = get_registry().backends().values()
    if config.framework:
        backends = [backend for backend in backends if backend.matches(config.framework)]
    starters = {backend.import_name: backend.autostart_path for backend in backends if backend.autostart_path}
    if not starters:
        wanted = f"the {config.framework} backend" if config.framework else "a backend that starts by itself"
        raise BackendError(f"msprobe run needs {wanted}: pip install msprobe-torch")
    environment = job_environment(config_path, starters, os.environ)
    try:
        finished = subprocess.run(list(command), env=environment)
    except FileNotFoundError:
        raise click.UsageError(f"command not found: {command[0]}") from None
    except PermissionError:
        raise click.UsageError(f"not allowed to run: {command[0]}") from None
    except KeyboardInterrupt:
        ctx.exit(130)
    ctx.exit(finished.returncode if finished.returncode >= 0 else 128 - finished.returncode)


COMMANDS = [run_command]
