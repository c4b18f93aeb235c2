"""``msprobe config init|validate``."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import click
from pydantic import BaseModel

from msprobe.core.config import TASKS, DebuggerConfig, load_config
from msprobe.core.errors import EXIT_BAD_INPUT
from msprobe.core.files import write_new_file

# Sections worth writing for each task; the others keep their defaults.
_TASK_SECTIONS = {
    "statistics": ("statistics",),
    "tensor": ("tensor",),
    "structure": (),
    "overflow_check": ("overflow_check",),
    "nan_check": ("overflow_check",),
    "free_benchmark": ("free_benchmark",),
    "run_ut": ("run_ut",),
    "grad_probe": ("grad_probe",),
    "flight_recorder": ("flight_recorder",),
}


_COMMON_KEYS = ("task", "dump_path", "rank", "step", "level", "async_dump")
_COMMON_KEYS_26X = (*_COMMON_KEYS, "extra_info", "precision", "risk_level")


def starter_config(task: str, framework: str | None, dump_path: str, spelling: str = "1.2.2") -> dict[str, Any]:
    """A complete config for one task, in the reference's key order; ``spelling`` "26" writes 26.x's fields
    and names (task ``acc_check`` for ``run_ut``)."""
    data = DebuggerConfig(
        task=task, dump_path=dump_path, framework=framework, level="mix" if task == "structure" else "L1"
    )
    full = data.model_dump(by_alias=True)
    if spelling == "26":
        full["risk_level"] = "FOCUS"  # 26.x's default, written out
    keys = _COMMON_KEYS_26X if spelling == "26" else _COMMON_KEYS
    result = {key: full[key] for key in keys}
    if framework:
        result["framework"] = framework
    for section in _TASK_SECTIONS[task]:
        result[section] = {k: v for k, v in full[section].items() if v is not None}
    if spelling == "26":
        if task == "statistics":
            result["statistics"]["tensor_list"] = []
        if task == "run_ut":
            result["task"] = "acc_check"
            result["acc_check"] = result.pop("run_ut")
    elif task == "statistics":
        result["statistics"].pop("tensor_list", None)
    return result


def _yaml_scalar(value: Any) -> str:
    return json.dumps(value)


def _describe(model: type[BaseModel], key: str) -> str:
    for name, field in model.model_fields.items():
        if key in (name, field.alias):
            return field.description or ""
    return ""


def commented_yaml(data: dict[str, Any]) -> str:
    """YAML whose every key carries its field description as a comment."""
    lines = ["# msprobe config (the reference's config.json schema, as YAML)."]
    for key, value in data.items():
        if isinstance(value, dict):
            section = "run_ut" if key == "acc_check" else key  # 26.x's name of the same section
            section_model = type(getattr(DebuggerConfig(dump_path="x"), section))
            lines.append(f"{key}:")
            for sub_key, sub_value in value.items():
                comment = _describe(section_model, sub_key)
                lines.append(f"  # {comment}" if comment else "  #")
                lines.append(f"  {sub_key}: {_yaml_scalar(sub_value)}")
        else:
            comment = _describe(DebuggerConfig, key)
            if comment:
                lines.append(f"# {comment}")
            lines.append(f"{key}: {_yaml_scalar(value)}")
    return "\n".join(lines) + "\n"


@click.group("config")
def config_group() -> None:
    """Write a starter config or check an existing one."""


@config_group.command("init")
@click.option("--framework", type=click.Choice(["pytorch", "mindspore"]), default=None, help="Pin the backend.")
@click.option("--task", type=click.Choice(TASKS), default="statistics", show_default=True, help="Task to configure.")
@click.option("--dump-path", default="./dump_path", show_default=True, help="Where results go.")
@click.option(
    "-o",
    "--output",
    type=click.Path(dir_okay=False, path_type=Path),
    default=Path("config.yaml"),
    show_default=True,
    help="File to write: .yaml/.yml gets a comment on every field, .json is plain JSON.",
)
@click.option(
    "--format",
    "spelling",
    type=click.Choice(["1.2.2", "26"]),
    default="1.2.2",
    show_default=True,
    help="Whose config to write: mindstudio-probe 1.2.2's fields, or 26.x's (extra_info, precision, risk_level, "
    "task acc_check).",
)
@click.option("--force", is_flag=True, help="Overwrite an existing file.")
def init_command(framework: str | None, task: str, dump_path: str, output: Path, spelling: str, force: bool) -> None:
    """Write a valid config for TASK with every field at its default."""
    if output.exists() and not force:
        raise click.UsageError(f"{output} exists; pass --force to overwrite it")
    data = starter_config(task, framework, dump_path, spelling)
    if output.suffix.lower() in (".yaml", ".yml"):
        text = commented_yaml(data)
    else:
        text = json.dumps(data, indent=4) + "\n"
    data = text.encode("utf-8")
    write_new_file(output, lambda handle: handle.write(data))
    load_config(output)  # what we write must validate
    click.echo(f"wrote {output} (task {task})")


@config_group.command("validate")
@click.argument("files", nargs=-1, required=True, type=click.Path(path_type=Path))
def validate_command(files: tuple[Path, ...]) -> None:
    """Check config files; one line per file, non-zero exit if any is invalid."""
    from msprobe.core.errors import ConfigError

    failures = 0
    for file in files:
        try:
            config = load_config(file)
        except ConfigError as exc:
            failures += 1
            click.echo(f"invalid: {exc}", err=True)
            continue
        problem = _unavailable_perturbation(config) or _beyond_the_backends(config) or _dump_path_problem(config)
        if problem:
            failures += 1
            click.echo(f"invalid: {file}: {problem}", err=True)
            continue
        click.echo(f"valid: {file} (task {config.task}, level {config.level}, dump_path {config.dump_path})")
    if failures:
        raise SystemExit(EXIT_BAD_INPUT)


def _dump_path_problem(config: DebuggerConfig) -> str | None:
    from msprobe.core.config import dump_path_problem

    problem = dump_path_problem(config.dump_path)
    return f"dump_path: {problem}" if problem else None


def _beyond_the_backends(config: DebuggerConfig) -> str | None:
    """What no installed backend the config may run on can do (xor on MindSpore alone): the debugger refuses it
    when made, so validate says it first. With no backend installed there is nothing to check against."""
    from msprobe.core.plugins import get_registry

    backends = [
        b for b in get_registry().backends().values() if config.framework is None or b.matches(config.framework)
    ]
    problems = [backend.config_problem(config) for backend in backends]
    return problems[0] if backends and all(problems) else None


def _unavailable_perturbation(config: DebuggerConfig) -> str | None:
    """A free_benchmark.pert_mode no installed plugin provides (plugins add their own, so only they can say).

    With no backend installed there is nothing to check against; ``start()``
    checks again where the training runs.
    """
    if config.task != "free_benchmark":
        return None
    from msprobe.core.plugins import get_registry

    registry = get_registry()
    backends = sorted(
        name
        for name, backend in registry.backends().items()
        if config.framework is None or backend.matches(config.framework)
    )
    if not backends:
        return None
    mode = config.free_benchmark.pert_mode
    known: set[str] = set()
    for backend in backends:
        available = registry.perturbations(backend)
        if mode in available:
            if config.free_benchmark.handler_type == "fix" and not available[mode].fix:
                return (
                    f"field free_benchmark.handler_type: 'fix' needs a perturbation that declares fix=True, "
                    f"and '{mode}' does not"
                )
            return None
        known.update(available)
    where = " or ".join(backends)
    return (
        f"field free_benchmark.pert_mode: '{mode}' is not provided by any installed plugin for {where}"
        f" (available: {', '.join(sorted(known))})"
    )


COMMANDS = [config_group]
