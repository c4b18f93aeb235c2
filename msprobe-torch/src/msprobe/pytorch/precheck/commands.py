"""The PyTorch backend's commands: run_ut, multi_run_ut, run_overflow_check (reference spelling), compile_check,
replay, precision_bisect."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import click

from msprobe.core.errors import MsprobeError

RUNNER = "msprobe.pytorch.precheck.run_ut:ApiRunner"
SAVER = "msprobe.pytorch.precheck.run_ut:save_error_data"


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
    from msprobe.pytorch.precheck.overflow_rerun import rerun_overflows

    verdicts = rerun_overflows(read_dump(api_info))
    if not verdicts:
        raise MsprobeError(f"{api_info}: no API overflowed in this dump (no forward output holds inf or nan)")
    for name, verdict in verdicts:
        click.echo(f"The {name} overflow is {verdict}.")


def _script_option(help_text: str) -> Callable[[Callable], Callable]:
    """The user's script, which defines model_and_inputs() (compile_check and replay take the same)."""
    return click.option(
        "-s", "--script", required=True, type=click.Path(exists=True, dir_okay=False, path_type=Path), help=help_text
    )


@click.command("compile_check")
@_script_option(
    "A Python file defining model_and_inputs(), which returns (model, inputs): the model and a tuple of its "
    "example inputs."
)
@click.option("-b", "--backend", type=click.Choice(["inductor", "aot_eager", "all"]), default="all", show_default=True)
@click.option("-o", "--output", "output", required=True, type=click.Path(file_okay=False, path_type=Path))
@click.option(
    "--forward-only",
    is_flag=True,
    help="Skip the backward, which is otherwise checked when an input or a parameter requires grad.",
)
def compile_check_command(script: Path, backend: str, output: Path, forward_only: bool) -> None:
    """Which FX node or kernel torch.compile changed: the model's graph run eagerly and compiled, node by node,
    each node (and, for Inductor, each kernel replayed alone; and each gradient of the backward) against its
    float64 replay. Exit status 1 when one departs."""
    from msprobe.core.files import make_dir
    from msprobe.core.jobs import activity
    from msprobe.pytorch.compile.check import BACKENDS, check_compiled, load_script, write_table

    make_dir(output)  # a link given for the folder is refused before anything is written
    with activity("compile_check", f"loading {script}"):
        model, inputs = load_script(script)
    departed = False
    for name in BACKENDS if backend == "all" else (backend,):
        with activity(f"compile_check {name}"):
            check = check_compiled(model, inputs, name, forward_only=forward_only, report_to=output)
            table = write_table(check, output)
        click.echo(check.line())
        click.echo(f"table: {table}")
        for path in check.files:
            click.echo(f"  {path}")
        departed = departed or check.diagnosis().verdict != "none"
    if departed:
        raise SystemExit(1)


@click.command("replay")
@_script_option(
    "A Python file defining model_and_inputs(), as compile_check takes: the model as this run built it "
    "(its inputs are not used)."
)
@click.option("-m", "--module", "module", required=True, help="The module's path in the model, as in construct.json.")
@click.option("--npu_path", required=True, type=click.Path(path_type=Path), help="This run's step and rank folder "
              "of a tensor dump (step0/rank).")  # fmt: skip
@click.option("--bench_path", required=True, type=click.Path(path_type=Path), help="The golden run's step and rank "
              "folder of a tensor dump.")  # fmt: skip
@click.option("--call", default=0, show_default=True, type=click.IntRange(min=0), help="Which call of the module.")
def replay_command(script: Path, module: str, npu_path: Path, bench_path: Path, call: int) -> None:
    """Why a module's output differs, confirmed: the module run again here with this run's and the golden
    run's inputs and weights. Exit status 0 when the outputs agree, 1 when they differ."""
    from msprobe.core.replay import NONE
    from msprobe.pytorch.compile.check import load_script
    from msprobe.pytorch.replay import replay_module

    model, _ = load_script(script)
    report = replay_module(model, module, npu_path, bench_path, call)
    click.echo(report.table())
    if report.cause != NONE:
        raise SystemExit(1)


@click.command("precision_bisect")
@_script_option(
    "A Python file defining model_and_inputs(), as compile_check takes: the float32 model and its inputs; and "
    "optionally loss(output), the scalar a step differentiates (default: the mean square of the output)."
)
@click.option("--dtype", type=click.Choice(["bf16", "fp16"]), default="bf16", show_default=True)
@click.option("--mode", type=click.Choice(["cast", "autocast"]), default="cast", show_default=True,
              help="cast: the model cast to the dtype (each module's inputs to its own); autocast: the step under "
              "torch.autocast.")  # fmt: skip
@click.option("--tolerance", type=float, default=None,
              help="How far the loss and each gradient may be from the float32 twin's (relative; default 0.05 for "
              "bf16, 0.01 for fp16).")  # fmt: skip
@click.option("-m", "--module", "modules", multiple=True, help="A candidate module's path (repeat it); default: "
              "every leaf module.")  # fmt: skip
@click.option("--no-ranking", is_flag=True, help="Skip the sensitivity table (one run per candidate).")
@click.option("-o", "--output", "output", type=click.Path(file_okay=False, path_type=Path), default=None,
              help="A folder for precision_bisect.json: every run, the table and the answer.")  # fmt: skip
def precision_bisect_command(
    script: Path, dtype: str, mode: str, tolerance: float | None, modules: tuple[str, ...], no_ranking: bool,
    output: Path | None,
) -> None:  # fmt: skip
    """Which modules a bf16 or fp16 step needs in float32: the smallest set whose upcast brings the loss and
    gradients back within a tolerance of the float32 twin's, by group testing, and each module's error alone in
    low precision. Exit status 0 when nothing is needed, 1 when the step is beyond the tolerance."""
    import json

    from tqdm import tqdm

    from msprobe.core.bisect import NOTHING_NEEDED
    from msprobe.core.files import make_dir, write_new_file
    from msprobe.pytorch.bisect import bisect_precision, runs_to_expect
    from msprobe.pytorch.compile.check import load_script_module, model_and_inputs

    if output is not None:
        make_dir(output)  # a link given for the folder is refused before anything runs
    loaded = load_script_module(script)
    model, inputs = model_and_inputs(loaded, script)
    loss = getattr(loaded, "loss", None)
    if loss is not None and not callable(loss):
        raise MsprobeError(f"{script}: loss is defined but is not a function of the model's output")
    bar = tqdm(total=runs_to_expect(model, modules, not no_ranking), unit="run", desc="precision_bisect",
               disable=None, leave=False)  # fmt: skip

    def progress(doing: str) -> None:
        if bar.n >= bar.total:
            bar.total = bar.n + 1
        bar.set_postfix_str(doing, refresh=False)
        bar.update(1)

    try:
        result = bisect_precision(
            model, inputs, loss, dtype=dtype, mode=mode, tolerance=tolerance, modules=modules or None,
            rank=not no_ranking, progress=progress,
        )  # fmt: skip
    finally:
        bar.close()
    click.echo(result.table())
    if output is not None:
        path = output / "precision_bisect.json"
        text = json.dumps(result.to_json(), indent=2).encode()
        write_new_file(path, lambda handle: handle.write(text))
        click.echo(f"written: {path}")
    if result.outcome != NOTHING_NEEDED:
        raise SystemExit(1)


def commands() -> list[click.Command]:
    from msprobe.core.run_ut_cli import run_ut_commands

    return [
        *run_ut_commands(RUNNER, SAVER, lambda device: _devices(device, 1)),
        run_overflow_check_command,
        compile_check_command,
        replay_command,
        precision_bisect_command,
    ]
