"""``msprobe compare`` and ``msprobe merge_result``: the reference's spelling, one verdict line per rank."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import click

from msprobe.cli.options import (
    engine_of,
    engine_options,
    fuzzy_match_option,
    input_path_option,
    layer_mapping_option,
)


@click.command("compare")
@input_path_option("compare.json naming npu_path and bench_path.")
@click.option(
    "-o",
    "--output_path",
    "output_path",
    default="./output",
    show_default=True,
    type=click.Path(file_okay=False, path_type=Path),
    help="Folder for the result files.",
)
@click.option(
    "-s",
    "--stack_mode",
    is_flag=True,
    help="Add the NPU_Stack_Info column from compare.json's stack_path (without a stack_path, the column comes "
    "whenever a stack.json lies beside the NPU dump).",
)
@click.option(
    "-c", "--compare_only", is_flag=True, help="Skip the diagnosis (where the runs part ways) and its advisor file."
)
@fuzzy_match_option
@click.option("-dm", "--data_mapping", type=click.Path(dir_okay=False), help="YAML: NPU data name -> bench data name.")
@click.option(
    "-am",
    "--api_mapping",
    is_flag=False,
    flag_value="",
    default=None,
    metavar="[FILE]",
    help="Cross-framework API matching; FILE adds rules to the built-in MindSpore-to-PyTorch table.",
)
@click.option(
    "-cm",
    "--cell_mapping",
    is_flag=False,
    flag_value="",
    default=None,
    metavar="[FILE]",
    help="Cross-framework cell/module matching; FILE maps cell_name.Class to module_name.Class.",
)
@layer_mapping_option("YAML: MindSpore layer names -> PyTorch.")
@click.option(
    "--first-divergence",
    "first_divergence",
    is_flag=True,
    help="Also write where the runs part ways, over every step and rank compare.json names, to "
    "first_divergence_*.json (the diagnosis every msprobe surface gives).",
)
@click.option(
    "--consistent_check",
    "consistent_check",
    is_flag=True,
    help="Train/infer consistency (mindstudio-probe 26.x's name): npu_path and bench_path are .jsonl files of the "
    "same tokens scored by the training forward and by the inference engine.",
)
@click.option(
    "--logprob-tolerance",
    "logprob_tolerance",
    type=click.FloatRange(min=0.0),
    default=None,
    help="Comparing responses: log-probabilities further apart than this many nats differ (default 0.001).",
)
@click.option(
    "--replay",
    "replay_script",
    type=click.Path(exists=True, dir_okay=False, path_type=Path),
    default=None,
    help="With --first-divergence, on two tensor dumps of one step and rank: replay the module where the runs part "
    "ways, with the model this script's model_and_inputs() builds, and say whether that confirms the answer.",
)
@engine_options
def compare_command(
    input_path: Path,
    output_path: Path,
    stack_mode: bool,
    compare_only: bool,
    fuzzy_match: bool,
    data_mapping: str | None,
    api_mapping: str | None,
    cell_mapping: str | None,
    layer_mapping: str | None,
    first_divergence: bool,
    consistent_check: bool,
    logprob_tolerance: float | None,
    replay_script: Path | None,
    engine: str,
    ray_address: str | None,
) -> None:
    """Compare two dumps (statistics, tensor or md5 mode, picked from the dumps); the ranks of a multi-rank
    compare run on --engine. Two .jsonl files of generated responses are compared token by token."""
    from msprobe.core.compare.run import diagnose_across, overall_line, run_compare_json, write_first_divergence
    from msprobe.core.diagnosis.runs import MAX_DIAGNOSED_BYTES

    mappings = {
        "data_mapping": data_mapping,
        "api_mapping": api_mapping or None,
        "cell_mapping": cell_mapping or None,
        "layer_mapping": layer_mapping,
        "cross_framework": api_mapping is not None or cell_mapping is not None,  # -am/-cm alone: built-in tables
    }
    if replay_script is not None and not first_divergence:
        from msprobe.core.errors import UsageError

        raise UsageError("--replay: replays the module --first-divergence names; give --first-divergence too")
    # --first-divergence asks for the diagnosis: it then reads as much as the answer it writes, and the verdict
    # and exit code rest on that one answer
    summaries = run_compare_json(
        input_path, output_path, stack_mode, compare_only and not first_divergence, fuzzy_match, mappings,
        engine_of(engine, ray_address), consistent=consistent_check, tolerance=logprob_tolerance,
        diagnosis_limit=MAX_DIAGNOSED_BYTES if first_divergence else None,
    )  # fmt: skip
    several = len(summaries) > 1
    if first_divergence and any(s.mode == "generation" for s in summaries):
        click.echo("--first-divergence reads dumps; for two generations the line above names the first token")
        first_divergence = False
    answer = None
    if several and (first_divergence or not compare_only):
        answer = diagnose_across(input_path, summaries)
    elif first_divergence:
        answer = summaries[0].diagnosis
    if summaries and summaries[0].note:
        click.echo(f"ranks merged: {summaries[0].note}")
    for summary in summaries:
        click.echo(summary.line())
    files = [str(f) for s in summaries for f in s.files]
    if answer is not None:
        click.echo(f"{_over_all(summaries)}: {answer.line()}" if several else answer.line())
        if first_divergence:
            files.append(str(write_first_divergence(answer, output_path)))
        if replay_script is not None:
            click.echo(_replayed(answer, summaries, input_path, replay_script))
    click.echo(f"results: {', '.join(files)}")
    if several:
        click.echo(overall_line(summaries))
    code = max((s.exit_code for s in summaries), default=2)  # NO DATA (2) outranks SUSPICIOUS (1)
    if code:
        raise SystemExit(code)


def _replayed(answer: Any, summaries: list, input_path: Path, script: Path) -> str:
    """The line ``--replay`` adds: the module where the runs part ways, run again with each run's values."""
    from msprobe.core.compare.run import read_compare_json
    from msprobe.core.diagnosis import DIVERGENCE
    from msprobe.core.dump.layout import dump_folders
    from msprobe.core.dump.reader import read_dump
    from msprobe.core.plugins import get_registry
    from msprobe.core.replay import confirmation, module_call

    if answer.verdict != DIVERGENCE or not answer.module:
        return "replay: nothing to replay (the runs do not part ways inside a module)"
    if len(summaries) != 1 or summaries[0].compared is not None:
        return (
            "replay: give compare.json one step and rank of each run (a merged or multi-rank compare is not replayed)"
        )
    spec = read_compare_json(input_path)
    folders = []
    for field, path in (("npu_path", spec.npu_path), ("bench_path", spec.bench_path)):
        found = list(dump_folders(Path(path).parent if Path(path).is_file() else Path(path), field).values())
        if len(found) != 1:
            return f"replay: {field} holds {len(found)} step and rank folders; give it one"
        folders.append(found[0])
    call = module_call(read_dump(folders[0]).construct or {}, answer.module, answer.api)
    report = get_registry().call_first(
        "msprobe_replay", script=str(script), module=answer.module, call=call, npu_path=str(folders[0]),
        bench_path=str(folders[1]),
    )  # fmt: skip
    if report is None:
        return "replay: no installed backend replays these dumps"
    return confirmation(answer.cause, report)


def _over_all(summaries: list) -> str:
    """What the answer of a multi-dump compare is over: "all ranks", "all steps", "all steps and ranks"."""
    steps = any(s.step is not None for s in summaries)
    ranks = any(s.rank is not None for s in summaries)
    return "all " + " and ".join(kind for kind, present in (("steps", steps), ("ranks", ranks or not steps)) if present)


@click.command("merge_result")
@click.option(
    "-i",
    "--input_dir",
    "input_dir",
    required=True,
    type=click.Path(path_type=Path),
    help="Folder of compare_result_rank{N}_*.xlsx files from a multi-rank compare.",
)
@click.option("-o", "--output_dir", "output_dir", required=True, type=click.Path(file_okay=False, path_type=Path))
@click.option(
    "-config",
    "--config-path",
    "config_path",
    required=True,
    type=click.Path(path_type=Path),
    help="YAML with 'api' (names to keep) and optional 'compare_index' (metrics).",
)
@engine_options
def merge_result_command(
    input_dir: Path, output_dir: Path, config_path: Path, engine: str, ray_address: str | None
) -> None:
    """Merge per-rank compare results into one sheet per metric (the ranks' files are read on --engine)."""
    from msprobe.core.compare.merge import merge_results

    click.echo(f"merged: {merge_results(input_dir, output_dir, config_path, engine_of(engine, ray_address))}")


@click.command("grad_probe")
@click.option(
    "-i1",
    "--input1",
    "input1",
    required=True,
    type=click.Path(path_type=Path),
    help="dump_path of the first grad_probe run.",
)
@click.option(
    "-i2", "--input2", "input2", required=True, type=click.Path(path_type=Path), help="dump_path of the second run."
)
@click.option("-o", "--output", "output", required=True, type=click.Path(file_okay=False, path_type=Path))
@engine_options
def grad_probe_command(input1: Path, input2: Path, output: Path, engine: str, ray_address: str | None) -> None:
    """Compare the gradient directions of two runs step by step and name the first bad step (the ranks of a
    multi-rank run on --engine)."""
    from msprobe.core.grad_probe import GradComparator

    results = GradComparator.compare_distributed(input1, input2, output, engine_of(engine, ray_address))
    for result in results:
        where = f"rank {result.rank}: " if len(results) > 1 else ""
        if result.first_bad_step is None:
            click.echo(f"{where}PASS: gradient directions agree over steps {result.steps[0]}-{result.steps[-1]}")
        else:
            names = ", ".join(result.bad_parameters[:5])
            click.echo(f"{where}SUSPICIOUS: first bad step {result.first_bad_step} ({names})")
    click.echo(f"results: {output}")
    if any(result.first_bad_step is not None for result in results):
        raise SystemExit(1)


@click.command("api_precision_compare")
@click.option(
    "-npu",
    "--npu_csv_path",
    "npu_csv",
    required=True,
    type=click.Path(path_type=Path),
    help="accuracy_checking_details_*.csv of the device under test.",
)
@click.option(
    "-gpu",
    "--gpu_csv_path",
    "gpu_csv",
    required=True,
    type=click.Path(path_type=Path),
    help="accuracy_checking_details_*.csv of the reference device.",
)
@click.option(
    "-o", "--out_path", "output", default="./", show_default=True, type=click.Path(file_okay=False, path_type=Path)
)
def api_precision_compare_command(npu_csv: Path, gpu_csv: Path, output: Path) -> None:
    """Judge one device's run_ut details against another's (the reference's NPU-vs-GPU comparison)."""
    from msprobe.core.precheck.precision_compare import api_precision_compare

    result, details, errors = api_precision_compare(npu_csv, gpu_csv, output)
    click.echo(f"{'PASS' if errors == 0 else 'ERRORS'}: {errors} API(s) in error")
    click.echo(f"results: {result}, {details}")
    if errors:
        raise SystemExit(1)


COMMANDS = [compare_command, merge_result_command, grad_probe_command, api_precision_compare_command]
