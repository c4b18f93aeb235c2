"""What the documentation imports from msprobe.pytorch and msprobe.mindspore is what they publish.

Read statically (ast, no framework needed): every name a page imports from a backend package, at any depth
(``from msprobe.pytorch.op_log import OpLog``, ``msprobe.pytorch.check_compiled(...)``), is in that package's
``__all__``; and both publish mindstudio-probe's ``compare`` and ``compare_distributed``. The torch and
MindSpore sessions check that each name resolves.
"""

from __future__ import annotations

import ast
import re

from repo_paths import REPO_ROOT

PACKAGES = {
    "pytorch": REPO_ROOT / "msprobe-torch" / "src" / "msprobe" / "pytorch" / "__init__.py",
    "mindspore": REPO_ROOT / "msprobe-mindspore" / "src" / "msprobe" / "mindspore" / "__init__.py",
}
_IMPORT = re.compile(r"from msprobe\.(pytorch|mindspore)((?:\.\w+)*) import (?:\(([\w,\s]+)\)|([\w, ]+))")
_CALL = re.compile(r"msprobe\.(pytorch|mindspore)((?:\.\w+)*)\.(\w+)\(")


def published(package: str) -> set[str]:
    """The package's ``__all__``, which must name exactly what its lazy ``_EXPORTS`` resolve."""
    exports = listed = None
    for node in ast.parse(PACKAGES[package].read_text(encoding="utf-8")).body:
        targets = [getattr(target, "id", None) for target in getattr(node, "targets", [])]
        if "_EXPORTS" in targets:
            exports = {key.value for key in node.value.keys}
        if "__all__" in targets:
            listed = {item.value for item in node.value.elts}
    assert exports is not None and listed == exports, f"{PACKAGES[package]}: __all__ is not _EXPORTS' names"
    return listed


def documented() -> dict[str, set[str]]:
    """Package -> every name a page imports from it or from a module inside it (under the name it is imported
    as, when the page renames it: ``import HuggingFaceDumpCallback as DumpCallback``)."""
    found: dict[str, set[str]] = {"pytorch": set(), "mindspore": set()}
    pages = [*sorted((REPO_ROOT / "docs").rglob("*.md")), REPO_ROOT / "README.md"]
    for page in pages:
        text = page.read_text(encoding="utf-8")
        for package, _, grouped, plain in _IMPORT.findall(text):
            for name in re.split(r"[,\n]", grouped or plain):
                name = name.strip().split(" as ")[0].strip()
                if name and name.isidentifier():
                    found[package].add(name)
        for package, _, name in _CALL.findall(text):
            found[package].add(name)
    return found


def test_every_name_the_docs_import_is_published():
    for package, names in documented().items():
        missing = sorted(names - published(package))
        assert not missing, f"msprobe.{package} does not publish what the docs import: {missing}"


def test_both_backends_publish_the_reference_s_compare_functions():
    for package in PACKAGES:
        assert {"PrecisionDebugger", "seed_all", "compare", "compare_distributed"} <= published(package)


def test_the_check_reads_imports_and_calls():
    text = "from msprobe.pytorch.op_log import OpLog\nx = msprobe.pytorch.compile.check.check_compiled(m)"
    assert [plain for _, _, _, plain in _IMPORT.findall(text)] == ["OpLog"]
    assert [name for _, _, name in _CALL.findall(text)] == ["check_compiled"]
