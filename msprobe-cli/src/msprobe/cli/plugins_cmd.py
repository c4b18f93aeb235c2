"""``msprobe plugins``: what was discovered, with versions, availability and errors."""

from __future__ import annotations

import click

from msprobe.core.plugins import get_registry


@click.command("plugins")
def plugins_command() -> None:
    """List installed backends and plugins, their versions and what they add."""
    registry = get_registry()
    infos = registry.plugin_infos()
    backends = registry.backends()
    disabled = [info.name for info in infos if info.disabled]
    if not backends and disabled:
        click.echo(f"No backend is enabled ({', '.join(disabled)} disabled by MSPROBE_DISABLE_PLUGINS).")
    elif not backends:
        click.echo("No backend is installed: pip install msprobe-torch (PyTorch) or msprobe-mindspore (MindSpore).")
    for name in registry.unknown_disabled_names():
        click.echo(f"msprobe: warning: MSPROBE_DISABLE_PLUGINS names '{name}', which matches no plugin", err=True)
    for info in infos:
        label = "built-in" if info.builtin else f"{info.distribution or '?'} {info.version}".strip()
        kind = "backend" if info.backend is not None else "plugin"
        click.echo(f"{info.name} ({kind}, {label}{', disabled' if info.disabled else ''})")
        if info.disabled:
            click.echo("    status: disabled by MSPROBE_DISABLE_PLUGINS")
            continue
        if info.backend is not None:
            aliases = ", ".join(info.backend.aliases)
            click.echo(f"    framework: {info.backend.name} (aliases: {aliases}): {info.backend.describe()}")
        for title, items in (
            ("commands", info.commands),
            ("compare metrics", info.metrics),
            ("perturbations", info.perturbations),
            ("tasks", info.tasks),
        ):
            if items:
                click.echo(f"    {title}: {', '.join(items)}")
        for error in info.errors:
            click.echo(f"    error: {error}")
    broken = sum(1 for info in infos if info.errors)
    builtin = sum(1 for info in infos if info.builtin)
    click.echo(
        f"{len(backends)} backend(s), {len(infos) - builtin} installed plugin(s) and {builtin} built-in, "
        f"{broken} with errors"
    )
    click.echo(f"statistics kernels: {_kernels_line()}")


def _kernels_line() -> str:
    from msprobe.core.dump import float_stats

    if float_stats.AVAILABLE:
        return f"C, one pass ({float_stats.instruction_set()})"
    return "the frameworks' own (msprobe-core was built without a C compiler, or MSPROBE_NO_KERNELS is set)"


COMMANDS = [plugins_command]
