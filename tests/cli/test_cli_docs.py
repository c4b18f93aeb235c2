"""docs/cli.md agrees with the command line: every command and option it has is documented."""

from docs_agree import plugins_undocumented, undocumented


def test_every_command_and_option_is_in_the_cli_page():
    assert undocumented() == []


def test_the_plugins_page_shows_what_msprobe_plugins_prints():
    assert plugins_undocumented() == []


def test_the_help_names_every_alias():
    from click.testing import CliRunner

    from msprobe.cli.main import COMMAND_ALIASES, cli

    shown = " ".join(CliRunner().invoke(cli, ["--help"]).output.split())
    assert all(f"{alias} (= {name})" in shown for alias, name in COMMAND_ALIASES.items())
    assert "graph_visualize (= graph)" in shown
