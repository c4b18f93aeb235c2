"""docs/cli.md agrees with the command line, the PyTorch backend's commands included."""

from docs_agree import plugins_undocumented, undocumented


def test_every_command_and_option_is_in_the_cli_page():
    assert undocumented() == []


def test_the_plugins_page_shows_what_msprobe_plugins_prints():
    assert plugins_undocumented() == []
