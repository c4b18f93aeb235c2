"""``msprobe parse``: an interactive ``Parse >>>`` shell, and the same commands one-shot.

msprobe parse                      # interactive
msprobe parse pt -n x.pt           # statistics of one tensor file (and a .txt of its values)
msprobe parse cn -m a.npy -g b.npy # compare two tensor files
msprobe parse pk -f dump.json -n Functional.conv2d.0.forward
msprobe parse convert -i a.pt -o a.npy
"""

from __future__ import annotations

import cmd
import shlex
from pathlib import Path

import click

from msprobe.core import parse
from msprobe.core.errors import MsprobeError


def _table(title: str, rows: list[tuple[int, float, float, float]]) -> list[str]:
    lines = [title, f"{'Index':>8}  {'Left':>16}  {'Right':>16}  {'Diff':>16}"]
    lines += [f"{i:>8}  {a:>16.8g}  {b:>16.8g}  {d:>16.8g}" for i, a, b, d in rows]
    return lines


def _pt(name: Path, save_text: bool) -> None:
    array = parse.load_tensor(name)
    click.echo(parse.summarize(array, getattr(array, "source_dtype", None)).line())  # bfloat16, not float32
    click.echo(f"Path: {name}")
    if save_text:
        click.echo(f"TextFile: {parse.save_text(array, name)}")


def _cn(mine: Path, golden: Path, count: int, atol: float, rtol: float, save_text: bool) -> None:
    left, right = parse.load_tensor(mine), parse.load_tensor(golden)
    result = parse.compare_arrays(left, right, count, atol, rtol)
    metrics = result.metrics
    click.echo(
        f"Cosine: {metrics.cosine}  MaxAbsErr: {metrics.max_abs_err}  MaxRelativeErr: {metrics.max_relative_err}  "
        f"One Thousandth Err Ratio: {metrics.one_thousandth}  "
        f"Five Thousandths Err Ratio: {metrics.five_thousandths}"
    )
    if metrics.message:
        click.echo(metrics.message)
    click.echo(f"Left:  {result.left.line()}  {mine}")
    click.echo(f"Right: {result.right.line()}  {golden}")
    click.echo(f"{result.error_count} elements exceed atol={atol} and rtol={rtol}")
    for line in _table("Error Item Table", result.errors) + _table("Top Item Table", result.top):
        click.echo(line)
    if save_text:
        parse.save_text(left, mine)
        parse.save_text(right, golden)


def _pk(dump_json: Path, api_name: str) -> None:
    lines, stack = parse.api_info(dump_json, api_name)
    click.echo("Statistic Info:")
    for line in lines:
        click.echo(f"  {line}")
    if stack:
        click.echo("Stack Info:")
        for frame in stack:
            click.echo(f"  {frame}")


def _convert(source: Path, target: Path) -> None:
    parse.save_tensor(parse.load_tensor(source), target)
    click.echo(f"wrote {target}")


@click.group("parse", invoke_without_command=True)
@click.pass_context
def parse_group(ctx: click.Context) -> None:
    """Inspect and compare tensor files; without a subcommand, an interactive 'Parse >>>' shell."""
    if ctx.invoked_subcommand is None:
        ParseShell().cmdloop()


@parse_group.command("pt")
@click.option("-n", "name", required=True, type=click.Path(path_type=Path), help="A .npy or .pt file.")
@click.option("-s", "save_text", is_flag=True, help="Also write the values to NAME.txt.")
def pt_command(name: Path, save_text: bool) -> None:
    """Statistics of one tensor file."""
    _pt(name, save_text)


@parse_group.command("cn")
@click.option("-m", "mine", required=True, type=click.Path(path_type=Path), help="Data to check.")
@click.option("-g", "golden", required=True, type=click.Path(path_type=Path), help="Benchmark data.")
@click.option("-p", "count", default=20, show_default=True, help="Elements to print.")
@click.option("-al", "atol", default=0.001, show_default=True, help="Absolute error threshold.")
@click.option("-rl", "rtol", default=0.001, show_default=True, help="Relative error threshold.")
@click.option("-s", "save_text", is_flag=True, help="Also write both files' values as .txt.")
def cn_command(mine: Path, golden: Path, count: int, atol: float, rtol: float, save_text: bool) -> None:
    """Compare two tensor files: whole-tensor metrics and the elements over the thresholds."""
    _cn(mine, golden, count, atol, rtol, save_text)


@parse_group.command("pk")
@click.option("-f", "dump_json", required=True, type=click.Path(path_type=Path), help="A dump.json.")
@click.option("-n", "api_name", required=True, help="Entry name, e.g. Functional.conv2d.0.forward.")
def pk_command(dump_json: Path, api_name: str) -> None:
    """Statistics and stack of one dump.json entry."""
    _pk(dump_json, api_name)


@parse_group.command("convert")
@click.option("-i", "source", required=True, type=click.Path(path_type=Path), help=".pt or .npy file to read.")
@click.option("-o", "target", required=True, type=click.Path(path_type=Path), help=".npy or .pt file to write.")
def convert_command(source: Path, target: Path) -> None:
    """Convert a tensor file between .pt and .npy."""
    _convert(source, target)


for _name in ("cad", "vc", "dc"):

    @parse_group.command(_name, context_settings={"ignore_unknown_options": True, "allow_extra_args": True})
    def _needs_cann() -> None:
        """Ascend kernel dump (.bin) data: needs Ascend CANN."""
        raise MsprobeError(parse.acl_refusal())


class ParseShell(cmd.Cmd):
    """The interactive front of the same commands; errors are printed, the shell goes on."""

    prompt = "Parse >>> "
    intro = "msprobe parse: pt, cn, pk, convert (help for more, Ctrl+D or exit to leave)"

    def _run(self, command: click.Command, line: str) -> None:
        try:
            command.main(args=shlex.split(line), prog_name=command.name, standalone_mode=False)
        except MsprobeError as exc:
            click.echo(f"Error: {exc}")
        except click.ClickException as exc:
            click.echo(f"Error: {exc.format_message()}")
        except (SystemExit, click.exceptions.Abort):
            pass
        except ValueError as exc:  # shlex: an unclosed quote
            click.echo(f"Error: cannot read that line ({exc})")
        except Exception as exc:  # the shell outlives any one bad line
            click.echo(f"Error: internal error {type(exc).__name__}: {exc}")

    def do_pt(self, line: str) -> None:
        """pt -n FILE [-s]: statistics of a tensor file."""
        self._run(pt_command, line)

    def do_cn(self, line: str) -> None:
        """cn -m MINE -g GOLDEN [-p N] [-al ATOL] [-rl RTOL] [-s]: compare two tensor files."""
        self._run(cn_command, line)

    def do_pk(self, line: str) -> None:
        """pk -f dump.json -n API_NAME: one entry's statistics and stack."""
        self._run(pk_command, line)

    def do_convert(self, line: str) -> None:
        """convert -i SOURCE -o TARGET: between .pt and .npy."""
        self._run(convert_command, line)

    def default(self, line: str) -> None:
        word = line.split(maxsplit=1)[0] if line.split() else ""
        if word in ("cad", "vc", "dc"):
            click.echo(f"Error: {parse.acl_refusal()}")
        else:
            click.echo(f"Unknown command '{word}': pt, cn, pk, convert, exit")

    def do_exit(self, line: str) -> bool:
        """Leave the shell."""
        return True

    do_quit = do_exit

    def do_EOF(self, line: str) -> bool:
        click.echo()
        return True

    def emptyline(self) -> None:
        pass


COMMANDS = [parse_group]
