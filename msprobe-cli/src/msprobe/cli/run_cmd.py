"""``msprobe run``: a training command run with the dump on, the script unchanged."""

from __future__ import annotations

import os
import signal
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
    """Run COMMAND ('python train.py ...', 'torchrun ...') with the dump on in each of its processes.

    Each dump step runs from the model's first call to the next optimizer.step(), and the dump ends when
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
        raise BackendError(f"msprobe run needs {wanted}: pip install msprobe-torch (or msprobe-mindspore)")
    environment = job_environment(config_path, starters, os.environ)
    try:
        process = subprocess.Popen(list(command), env=environment)
    except FileNotFoundError:
        raise click.UsageError(f"command not found: {command[0]}") from None
    except PermissionError:
        raise click.UsageError(f"not allowed to run: {command[0]}") from None
    returncode = _wait_as_a_launcher(process)
    ctx.exit(returncode if returncode >= 0 else 128 - returncode)


FORWARDED = ("SIGTERM", "SIGHUP", "SIGQUIT", "SIGUSR1", "SIGUSR2")


def _wait_as_a_launcher(process: subprocess.Popen) -> int:
    """Wait for the job as a launcher does: a signal sent to msprobe run (a scheduler's SIGTERM) goes on to the
    job, which ends in its own time (its dump written); Ctrl-C, which the terminal sends to the job too, is left
    to it rather than cutting its cleanup short."""
    previous = {}

    def forward(signum: int, frame: object) -> None:
        process.send_signal(signum)

    for name in FORWARDED:
        number = getattr(signal, name, None)
        if number is not None:
            previous[number] = signal.signal(number, forward)
    previous[signal.SIGINT] = signal.signal(signal.SIGINT, signal.SIG_IGN)
    try:
        return process.wait()
    finally:
        for number, handler in previous.items():
            signal.signal(number, handler)


COMMANDS = [run_command]
