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


def _lists(config: Path | None) -> tuple[list[str], list[str]]:
    if config is None:
        return [], []
    from msprobe.core.config import load_config

    section = load_config(config).run_ut
    return section.white_list, section.black_list


def _run(
    api_info: Path,
    output: Path,
    save_error_data: bool,
    csv_path: Path | None,
    filter_api: bool,
    device: str | None,
    config: Path | None,
    processes: int,
) -> None:
    from tqdm import tqdm

    from msprobe.core.precheck.driver import run_ut

    white, black = _lists(config)
    bar = tqdm(total=0, unit="API", desc="run_ut", disable=None)

    def progress(done: int, total: int) -> None:
        bar.total = total
        bar.n = done
        bar.refresh()

    try:
        summary = run_ut(
            dump_json=api_info,
            output_dir=output,
            runner_path=RUNNER,
            save_error_path=SAVER,
            devices=_devices(device, processes),
            processes=processes,
            resume_csv=csv_path,
            save_error_data=save_error_data,
            white_list=white,
            black_list=black,
            filter_duplicates=filter_api,
            progress=progress,
        )
    finally:
        bar.close()
    click.echo(summary.line())
    click.echo(f"results: {summary.result_csv}, {summary.details_csv}")
    if summary.errors:
        raise SystemExit(1)


def _options(function):
    function = click.option(
        "-api_info",
        "--api_info_file",
        "api_info",
        required=True,
        type=click.Path(path_type=Path),
        help="dump.json of a statistics or tensor dump.",
    )(function)
    function = click.option(
        "-o",
        "--out_path",
        "output",
        default="./",
        show_default=True,
        type=click.Path(file_okay=False, path_type=Path),
        help="Folder for the result files.",
    )(function)
    function = click.option(
        "-save_error_data", "save_error_data", is_flag=True, help="Keep inputs and outputs of APIs that fail."
    )(function)
    function = click.option(
        "-csv_path",
        "--result_csv_path",
        "csv_path",
        type=click.Path(path_type=Path),
        help="accuracy_checking_result_*.csv of an interrupted run, to resume it.",
    )(function)
    function = click.option(
        "-f",
        "--filter_api",
        "filter_api",
        is_flag=True,
        help="Check only one call of APIs whose inputs have the same dtypes and shapes.",
    )(function)
    function = click.option(
        "-d",
        "--device",
        "device",
        default=None,
        help="Device id(s) for the tested side, e.g. 0 or 0,1; CPU when none is present.",
    )(function)
    function = click.option(
        "-config",
        "--config_path",
        "config",
        type=click.Path(path_type=Path),
        help="config.json whose run_ut section holds white_list and black_list.",
    )(function)
    return click.option("-j", "--jit_compile", "jit_compile", is_flag=True, help="Accepted for compatibility.")(
        function
    )


@click.command("run_ut")
@_options
def run_ut_command(
    api_info: Path,
    output: Path,
    save_error_data: bool,
    csv_path: Path | None,
    filter_api: bool,
    device: str | None,
    config: Path | None,
    jit_compile: bool,
) -> None:
    """Re-run every API of a dump in the tested precision and in float64, and judge the difference."""
    _run(api_info, output, save_error_data, csv_path, filter_api, device, config, 1)


@click.command("multi_run_ut")
@_options
@click.option(
    "-n",
    "--num_splits",
    "processes",
    default=2,
    show_default=True,
    type=click.IntRange(1, 64),
    help="Worker processes.",
)
def multi_run_ut_command(
    api_info: Path,
    output: Path,
    save_error_data: bool,
    csv_path: Path | None,
    filter_api: bool,
    device: str | None,
    config: Path | None,
    jit_compile: bool,
    processes: int,
) -> None:
    """run_ut split over several worker processes (and devices), merged into one pair of files."""
    _run(api_info, output, save_error_data, csv_path, filter_api, device, config, processes)


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
        raise MsprobeError(f"{api_info}: no forward API entries to re-run")
    for name, verdict in verdicts:
        click.echo(f"The {name} overflow is {verdict}.")


def commands() -> list[click.Command]:
    return [run_ut_command, multi_run_ut_command, run_overflow_check_command]
