"""run_ut and multi_run_ut as click commands, for any backend (the reference's option spelling).

A backend calls :func:`run_ut_commands` with the dotted paths of its runner
and error-data writer and a device resolver; click is imported here only
when a backend asks for the commands.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

from msprobe.core.jobs import Engine, click_options, engine_of


def _lists(config: Path | None) -> tuple[list[str], list[str]]:
    if config is None:
        return [], []
    from msprobe.core.config import load_config

    section = load_config(config).run_ut
    return section.white_list, section.black_list


def _online(config: Path) -> bool:
    from msprobe.core.config import load_config

    return load_config(config).run_ut.is_online


def run_ut_commands(runner: str, saver: str, devices: Callable[[str | None], list[str]]) -> list[Any]:
    import click

    def run(
        api_info: Path,
        output: Path,
        save_error_data: bool,
        csv_path: Path | None,
        filter_api: bool,
        device: str | None,
        config: Path | None,
        processes: int,
        engine: Engine | None = None,
    ) -> None:
        from tqdm import tqdm

        from msprobe.core.precheck.driver import run_ut

        if config is not None and _online(config):
            return receive(config, output)
        if api_info is None:
            raise click.UsageError("-api_info is required (or -config with run_ut.is_online for online pre-check)")
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
                runner_path=runner,
                save_error_path=saver,
                devices=devices(device),
                processes=processes,
                resume_csv=csv_path,
                save_error_data=save_error_data,
                white_list=white,
                black_list=black,
                filter_duplicates=filter_api,
                progress=progress,
                engine=engine,
            )
        finally:
            bar.close()
        click.echo(summary.line())
        click.echo(f"results: {summary.result_csv}, {summary.details_csv}")
        if summary.errors:
            raise SystemExit(1)

    def receive(config: Path, output: Path) -> None:
        from msprobe.core.config import load_config
        from msprobe.core.online.protocol import read_token
        from msprobe.core.online.receiver import Limits, Receiver, check_exposure

        section = load_config(config).run_ut
        if not section.nfs_path and not section.port:
            raise click.UsageError(f"{config}: run_ut needs port (or nfs_path) for online pre-check")
        limits = Limits(
            max_connections=section.max_connections,
            max_frame=section.max_frame_mb << 20,
            idle_timeout=section.idle_timeout,
            max_waiting_forwards=section.max_waiting_forwards,
            max_unauthenticated=section.max_unauthenticated,
            hello_timeout=section.hello_timeout,
        )
        token = read_token(section.auth_token_path)
        if not section.nfs_path:  # refused before any result file is made
            check_exposure(section.host or "127.0.0.1", section.tls_path, token, section.allow_plain_remote)
        receiver = Receiver(
            output,
            runner,
            section.rank_list,
            section.white_list,
            section.black_list,
            token=token,
            limits=limits,
            allow_plain_remote=section.allow_plain_remote,
            loopback_token=section.loopback_token,
        )
        click.echo(f"online run_ut: results go to {receiver.files.result}")
        summary = receiver.run(section.host, section.port, section.tls_path, section.nfs_path or None)
        click.echo(
            f"online run_ut: {summary['checked']} APIs checked, {summary['dropped']} dropped by senders, "
            f"{summary['rejected_frames']} bad frames refused"
        )

    def options(function: Callable) -> Callable:
        decorators = [
            click.option(
                "-api_info",
                "--api_info_file",
                "api_info",
                type=click.Path(path_type=Path),
                help="dump.json of a statistics or tensor dump (not needed for the online receiver).",
            ),
            click.option(
                "-o",
                "--out_path",
                "output",
                default="./",
                show_default=True,
                type=click.Path(file_okay=False, path_type=Path),
                help="Folder for the result files.",
            ),
            click.option(
                "-save_error_data", "save_error_data", is_flag=True, help="Keep inputs and outputs of APIs that fail."
            ),
            click.option(
                "-csv_path",
                "--result_csv_path",
                "csv_path",
                type=click.Path(path_type=Path),
                help="accuracy_checking_result_*.csv of an interrupted run, to resume it.",
            ),
            click.option(
                "-f",
                "--filter_api",
                "filter_api",
                is_flag=True,
                help="Check only one call of APIs whose inputs have the same dtypes and shapes.",
            ),
            click.option(
                "-d",
                "--device",
                "device",
                default=None,
                help="Device id(s) for the tested side, e.g. 0 or 0,1; CPU when none is present.",
            ),
            click.option(
                "-config",
                "--config_path",
                "config",
                type=click.Path(path_type=Path),
                help="config.json whose run_ut section holds white_list and black_list.",
            ),
            click.option("-j", "--jit_compile", "jit_compile", is_flag=True, help="Accepted for compatibility."),
        ]
        for decorator in reversed(decorators):
            function = decorator(function)
        return function

    @click.command("run_ut")
    @options
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
        """Re-run every API of a dump in the tested precision and against a float64 benchmark, and judge."""
        run(api_info, output, save_error_data, csv_path, filter_api, device, config, 1)

    @click.command("multi_run_ut")
    @options
    @click.option(
        "-n",
        "--num_splits",
        "processes",
        default=2,
        show_default=True,
        type=click.IntRange(1, 64),
        help="Processes sharing the APIs (this one included); with --engine ray, splits per cluster CPU.",
    )
    @click_options
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
        engine: str,
        ray_address: str | None,
    ) -> None:
        """run_ut split over several processes (and devices) or a Ray cluster, merged into one pair of files."""
        chosen = engine_of(engine, ray_address)
        run(api_info, output, save_error_data, csv_path, filter_api, device, config, processes, chosen)

    return [run_ut_command, multi_run_ut_command]
