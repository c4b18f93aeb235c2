"""The PyTorch backend's commands: run_ut, multi_run_ut, run_overflow_check (reference spelling)."""

from __future__ import annotations

from pathlib import Path

import click

from msprobe.core.errors import MsprobeError

RUNNER = "msprobe.pytorch.run_ut:ApiRunner"
SAVER = "msprobe.pytorch.run_ut:save_error_data"


def _devices(device: str | None, count: int) -> list[str]:
    import torch

    if device is None or device == "cpu":
        return ["cpu"]
    ids = [part.strip() for part in device.split(",") if part.strip()]
    if torch.cuda.is_available():
        return [f"cuda:{i}" for i in ids]
    npu = getattr(torch, "npu", None)
    if npu is not None and npu.is_available():
        return [f"npu:{i}" for i in ids]
    click.echo(f"device {device} is not available here: the tested side runs on the CPU", err=True)
    return ["cpu"]


@click.command("run_overflow_check")
@click.option(
    "-api_info",
    "--api_info_file",
    "api_info",
    required=True,
    type=click.Path(path_type=Path),
    help="dump.json of an overflow_check dump.",
)
@click.option("-j", "--jit_compile", is_flag=True, help="Accepted for compatibility.")
@click.option("-d", "--device", default=None, help="Accepted for compatibility: the re-run is on the CPU.")
def run_overflow_check_command(api_info: Path, jit_compile: bool, device: str | None) -> None:
    """Re-run overflowing APIs on the CPU: a normal overflow overflows there too."""
    from msprobe.core.dump.reader import read_dump
    from msprobe.pytorch.overflow_rerun import rerun_overflows

    verdicts = rerun_overflows(read_dump(api_info))
    if not verdicts:
        raise MsprobeError(f"{api_info}: no API overflowed in this dump (no forward output holds inf or nan)")
    for name, verdict in verdicts:
        click.echo(f"The {name} overflow is {verdict}.")


def commands() -> list[click.Command]:
    from msprobe.core.precheck.run_ut_cli import run_ut_commands

    return [*run_ut_commands(RUNNER, SAVER, lambda device: _devices(device, 1)), run_overflow_check_command]
