"""``msprobe config_check`` and ``msprobe checkpoint_compare``, mindstudio-probe 26.x's spellings.

``config_check -d [FILES]`` collects a setup, ``config_check -c A B``
compares two collections (two ``.zip`` packs) or two checkpoints (anything
else); ``checkpoint_compare A B`` is the plain name of the latter.
"""

from __future__ import annotations

from pathlib import Path

import click

from msprobe.core.errors import EXIT_DIFFERENT, UsageError

_DEFAULT_CKPT_OUTPUT = Path("ckpt_similarity.json")
_DEFAULT_PACK = Path("config_check_pack.zip")
_DEFAULT_RESULT = Path("config_check_result")


def _mapping_options(function):  # the compare's options for names that differ between the two
    function = click.option(
        "-lm", "--layer_mapping", type=click.Path(dir_okay=False), help="YAML of name-segment renames."
    )(function)
    return click.option(
        "-dm", "--data_mapping", type=click.Path(dir_okay=False), help="YAML: first name -> second name."
    )(function)


def run_checkpoint_compare(
    first: Path, second: Path, output: Path, data_mapping: str | None, layer_mapping: str | None
) -> None:
    from tqdm import tqdm

    from msprobe.core.checkpoint import (
        ParameterNames,
        compare_checkpoints,
        load_checkpoint,
        write_comparison,
    )

    if output.exists():
        raise UsageError(f"{output} exists already; choose another output path (-o)")
    left, right = load_checkpoint(first), load_checkpoint(second)
    cross = {left.framework, right.framework} == {"mindspore", "pytorch"}
    names = ParameterNames(cross, data_mapping, layer_mapping)
    with tqdm(total=len(left.tensors), unit="tensor", desc="checkpoint_compare", disable=None) as bar:
        comparison = compare_checkpoints(left, right, names, progress=bar.update)
    write_comparison(comparison, output)
    differing = comparison.differing
    click.echo(
        f"{len(comparison.rows)} tensors, {len(differing)} differ"
        + (f" (first: {differing[0]})" if differing else "")
        + f"; written to {output}"
    )
    if differing:
        raise SystemExit(EXIT_DIFFERENT)


@click.command("checkpoint_compare")
@click.argument("first", type=click.Path(exists=True, path_type=Path))
@click.argument("second", type=click.Path(exists=True, path_type=Path))
@click.option(
    "-o", "--output", type=click.Path(dir_okay=False, path_type=Path), default=_DEFAULT_CKPT_OUTPUT,
    show_default=True, help="The JSON result; an existing file is never overwritten.",
)  # fmt: skip
@_mapping_options
def checkpoint_compare_command(
    first: Path, second: Path, output: Path, data_mapping: str | None, layer_mapping: str | None
) -> None:
    """Compare two checkpoints tensor by tensor: safetensors, torch state_dict, Megatron folder, MindSpore ckpt."""
    run_checkpoint_compare(first, second, output, data_mapping, layer_mapping)


@click.command("config_check")
@click.option(
    "-d", "--dump", "collect", is_flag=True, help="Collect this machine's setup (FILES: launch script, YAML)."
)
@click.option("-c", "--compare", "compare", is_flag=True, help="Compare two packs, or two checkpoints (FILES: A B).")
@click.option("-o", "--output", type=click.Path(path_type=Path), help="Pack, result folder or result JSON.")
@_mapping_options
@click.argument("files", nargs=-1, type=click.Path(path_type=Path))
def config_check_command(
    collect: bool,
    compare: bool,
    output: Path | None,
    data_mapping: str | None,
    layer_mapping: str | None,
    files: tuple[Path, ...],
) -> None:
    """Check that two runs share their setup before comparing them (26.x's config_check).

    \b
    msprobe config_check -d [train.sh] [config.yaml] [-o pack.zip]
    msprobe config_check -c bench.zip cmp.zip [-o result_folder]
    msprobe config_check -c CKPT1 CKPT2 [-o ckpt_similarity.json]
    """
    if collect == compare:
        raise UsageError("config_check needs exactly one of -d (collect) and -c (compare)")
    if compare:
        if len(files) != 2:
            raise UsageError(f"config_check -c needs two paths, got {len(files)}")
        first, second = files
        for path in files:
            if not path.exists():
                raise UsageError(f"{path} does not exist")
        if first.suffix == ".zip" and second.suffix == ".zip" and first.is_file() and second.is_file():
            from msprobe.core.config_check import compare_packs

            result = compare_packs(first, second, output or _DEFAULT_RESULT)
            click.echo(result.summary_line())
            if not result.passed:
                raise SystemExit(EXIT_DIFFERENT)
            return
        run_checkpoint_compare(first, second, output or _DEFAULT_CKPT_OUTPUT, data_mapping, layer_mapping)
        return
    from msprobe.core.config_check import collect_static

    pack = collect_static(files, output or _DEFAULT_PACK)
    click.echo(f"wrote {pack}")


COMMANDS = [config_check_command, checkpoint_compare_command]
