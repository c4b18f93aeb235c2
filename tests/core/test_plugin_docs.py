"""The plugin docs agree with the code: the tutorial shows the files CI installs, the reference names every hook."""

import re

import pytest
from repo_paths import REPO_ROOT

from msprobe.core import hookspecs
from msprobe.core.backend import CompareMetric, Perturbation, Task
from msprobe.core.plugins import DEFAULT_PLUGINS

DOCS = REPO_ROOT / "docs"
MARKED_BLOCK = re.compile(r"<!-- file: (?P<path>\S+) -->\n```\w*\n(?P<body>.*?)```", re.S)


def test_every_tutorial_file_is_shown_as_it_is_in_the_repository():
    text = (DOCS / "plugin_tutorial.md").read_text()
    blocks = {match["path"]: match["body"] for match in MARKED_BLOCK.finditer(text)}
    files = sorted(p.relative_to(REPO_ROOT).as_posix() for p in (REPO_ROOT / "examples/plugin-tutorial").glob("*/*"))
    assert sorted(blocks) == files
    for path, body in blocks.items():
        assert body == (REPO_ROOT / path).read_text(), path


@pytest.mark.parametrize("hook", [name for name in dir(hookspecs) if name.startswith("msprobe_")])
def test_the_reference_page_describes_every_hook(hook):
    text = (DOCS / "plugins.md").read_text()
    assert f"`{hook}" in text, hook


@pytest.mark.parametrize("kind", [CompareMetric, Perturbation, Task])
def test_the_reference_page_lists_every_field(kind):
    text = (DOCS / "plugins.md").read_text()
    section = text.split(f"`{kind.__name__}(", 1)[1].split("\n## ", 1)[0]
    for field in kind.__dataclass_fields__:
        assert f"| `{field}` |" in section, (kind.__name__, field)


def _built_in_names() -> set[str]:
    """The core's default plugins and the entry points installed msprobe-cli declares (built from its
    pyproject.toml)."""
    from importlib import metadata

    declared = metadata.distribution("msprobe-cli").entry_points
    return {name for name, _ in DEFAULT_PLUGINS} | {p.name for p in declared if p.group == "msprobe.plugins"}


def test_the_reference_page_names_every_built_in_plugin():
    text = (DOCS / "plugins.md").read_text()
    for name in _built_in_names():
        assert f"`{name}`" in text


def test_the_hookspec_module_names_the_built_in_plugins_it_claims():
    claimed = set(re.findall(r"``(builtin-[a-z]+)``", hookspecs.__doc__))
    assert claimed == _built_in_names() and "builtin-commands" in claimed
