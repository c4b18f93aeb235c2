"""No module reaches into another's private names, and each C accelerator is imported by one Python module only:
the one that holds its switch. Read from the packages' source with ast, so a new shortcut fails here."""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PACKAGES = [ROOT / name / "src" for name in ("msprobe-core", "msprobe-torch", "msprobe-mindspore", "msprobe-cli")]

# each C extension and the one module that imports it (and may read its members)
WRAPPERS = {
    "msprobe.core._attributes": "msprobe.core.api_patch",
    "msprobe.core._celltext": "msprobe.core.spreadsheet",
    "msprobe.core.dump._kernels": "msprobe.core.dump.float_stats",
    "msprobe.core.dump._jsonscan": "msprobe.core.dump.block_reader",
    "msprobe.core.dump._frames": "msprobe.core.dump.stack",
    "msprobe.core.dump._journal": "msprobe.core.dump.writer",
    "msprobe.core.compare._tablerows": "msprobe.core.compare.rows",
    "msprobe.pytorch.dump._fast_path": "msprobe.pytorch.dump.fast_path",
}


def _private(name: str) -> bool:
    return name.startswith("_") and not name.startswith("__")


def _sources() -> list[tuple[str, ast.Module]]:
    found = []
    for package in PACKAGES:
        for path in sorted(package.rglob("*.py")):
            module = ".".join(path.relative_to(package).with_suffix("").parts).removesuffix(".__init__")
            found.append((module, ast.parse(path.read_text(encoding="utf-8"))))
    return found


def crossings(sources: list[tuple[str, ast.Module]]) -> list[str]:
    """Every private name one module takes from another, as 'module:line: what'."""
    found = []
    for module, tree in sources:
        imported: dict[str, str] = {}  # local name -> the msprobe module or name it stands for
        for node in ast.walk(tree):
            if isinstance(node, ast.ImportFrom) and node.module and node.module.startswith("msprobe"):
                for alias in node.names:
                    target = f"{node.module}.{alias.name}"
                    imported[alias.asname or alias.name] = target
                    if WRAPPERS.get(target) == module or WRAPPERS.get(node.module) == module:
                        continue
                    if _private(alias.name) or any(_private(part) for part in node.module.split(".")):
                        found.append(f"{module}:{node.lineno}: from {node.module} import {alias.name}")
            elif isinstance(node, ast.Import):
                for alias in node.names:
                    if alias.name.startswith("msprobe") and any(_private(p) for p in alias.name.split(".")):
                        found.append(f"{module}:{node.lineno}: import {alias.name}")
        for node in ast.walk(tree):
            if not (isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) and _private(node.attr)):
                continue
            owner = imported.get(node.value.id)
            if owner is not None and WRAPPERS.get(owner) != module:
                found.append(f"{module}:{node.lineno}: {node.value.id}.{node.attr}")
    return found


def test_no_module_takes_another_module_s_private_names():
    assert crossings(_sources()) == []


def test_the_check_sees_each_kind_of_crossing():
    """The rule is itself tested: each shortcut it exists to catch is caught, and a wrapper's own use is not."""
    cases = {
        "from msprobe.core.compare.mapping import _read": 1,
        "from msprobe.core.compare import _tablerows": 1,
        "from msprobe.core._celltext import lines": 1,
        "import msprobe.core.dump._kernels": 1,
        "from msprobe.pytorch.debugger import PrecisionDebugger\nPrecisionDebugger._current": 1,
        "from msprobe.core.compare import rows\nrows.c_rows": 0,
        "from msprobe.core.compare.rows import Row": 0,
    }
    for code, expected in cases.items():
        assert len(crossings([("msprobe.core.compare.tables", ast.parse(code))])) == expected, code
    wrapper = "from msprobe.core.compare import _tablerows\n_tablerows.configure"
    assert crossings([("msprobe.core.compare.rows", ast.parse(wrapper))]) == []


def test_the_entry_points_old_module_names_still_import_them():
    """Scripts written against msprobe.core.compare.api and msprobe.core.graph.api keep working."""
    from msprobe.core.compare import api as compare_api
    from msprobe.core.compare import run as compare_run
    from msprobe.core.graph import api as graph_api
    from msprobe.core.graph import run as graph_run

    for old, new in ((compare_api, compare_run), (graph_api, graph_run)):
        public = [name for name in vars(new) if not name.startswith("_") and callable(getattr(new, name))]
        defined = [name for name in public if getattr(getattr(new, name), "__module__", None) == new.__name__]
        assert defined and all(getattr(old, name) is getattr(new, name) for name in defined), old.__name__


def _core_private_attributes() -> set[str]:
    """Every ``self._name`` msprobe-core's Python assigns: the state that is core's own."""
    names = set()
    for path in (ROOT / "msprobe-core" / "src").rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) and node.value.id == "self":
                if _private(node.attr) and isinstance(node.ctx, ast.Store):
                    names.add(node.attr)
    return names


def _c_string_literals(path: Path) -> set[str]:
    import re

    return set(re.findall(r'"([A-Za-z_][A-Za-z0-9_]*)"', path.read_text(encoding="utf-8")))


def test_no_other_package_s_c_code_names_core_s_private_state():
    """The other packages' C extensions reach core's state through core's capsules, never by attribute name."""
    private = _core_private_attributes()
    assert {"_journal", "_map", "_position"} <= private  # the check sees the names it guards
    found = {}
    for package in PACKAGES[1:]:
        for path in package.rglob("*.c"):
            named = sorted(_c_string_literals(path) & private)
            if named:
                found[str(path.relative_to(ROOT))] = named
    assert found == {}


def file_safety_through_the_dump_writer(sources: list[tuple[str, ast.Module]]) -> list[str]:
    """Imports of a file-safety helper (a name msprobe.core.files defines) from the dump writer, which only
    uses them: a result writer that took them from there would depend on the dump format for its files."""
    files_tree = dict(sources)["msprobe.core.files"]
    helpers = {
        node.name for node in files_tree.body if isinstance(node, (ast.FunctionDef, ast.ClassDef))
    } | {target.id for node in files_tree.body if isinstance(node, ast.Assign) for target in node.targets
         if isinstance(target, ast.Name)}  # fmt: skip
    found = []
    for module, tree in sources:
        for node in ast.walk(tree):
            if isinstance(node, ast.ImportFrom) and node.module == "msprobe.core.dump.writer":
                found += [f"{module}:{node.lineno}: {alias.name}" for alias in node.names if alias.name in helpers]
    return found


def test_file_safety_comes_from_its_own_module_not_the_dump_writer():
    sources = _sources()
    assert file_safety_through_the_dump_writer(sources) == []
    # the rule sees what it exists to catch
    planted = ast.parse("from msprobe.core.dump.writer import DumpWriter, make_dir")
    assert file_safety_through_the_dump_writer([*sources, ("msprobe.core.graph.x", planted)]) == [
        "msprobe.core.graph.x:1: make_dir"
    ]


GRAMMAR_HOME = "msprobe.core.dump.entry_names"


def entry_grammar_outside_its_home(sources: list[tuple[str, ast.Module]]) -> list[str]:
    """Every string constant outside the grammar's module that spells the direction part of an entry name as a
    regular expression (``forward|backward``, ``(?:forward``...), or the splitting of a name at its count: a
    second definition of the grammar."""
    spelled = ("forward|backward", "backward|forward", "(?:forward", "parameters_grad$")
    found = []
    for module, tree in sources:
        if module == GRAMMAR_HOME:
            continue
        for node in ast.walk(tree):
            if isinstance(node, ast.Constant) and isinstance(node.value, str):
                if any(text in node.value for text in spelled):
                    found.append(f"{module}:{node.lineno}: {node.value[:60]!r}")
            is_call = isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)
            if is_call and node.func.attr == "rsplit" and len(node.args) == 2:  # name.rsplit(".", 2): kind, count
                if all(isinstance(a, ast.Constant) for a in node.args) and [a.value for a in node.args] == [".", 2]:
                    found.append(f"{module}:{node.lineno}: rsplit('.', 2)")
    return found


def test_the_entry_name_grammar_is_written_once():
    sources = _sources()
    assert entry_grammar_outside_its_home(sources) == []
    planted = ast.parse(
        'import re\n_API = re.compile(r"^(.+)\\.(\\d+)\\.(forward|backward)$")\nbase = n.rsplit(".", 2)[0]'
    )
    assert entry_grammar_outside_its_home([*sources, ("msprobe.core.graph.x", planted)]) == [
        "msprobe.core.graph.x:2: '^(.+)\\\\.(\\\\d+)\\\\.(forward|backward)$'",
        "msprobe.core.graph.x:3: rsplit('.', 2)",
    ]


CORE = ROOT / "msprobe-core" / "src" / "msprobe" / "core"


def folder_imports(sources: list[tuple[str, ast.Module]]) -> dict[str, set[str]]:
    """Which of msprobe-core's folders (sub-packages) each folder imports from, at any depth of its code."""
    folders = {path.name for path in CORE.iterdir() if (path / "__init__.py").is_file()}

    def folder_of(module: str) -> str | None:
        parts = module.split(".")
        return parts[2] if len(parts) > 2 and parts[:2] == ["msprobe", "core"] and parts[2] in folders else None

    edges: dict[str, set[str]] = {folder: set() for folder in folders}
    for module, tree in sources:
        source = folder_of(module)
        if source is None:
            continue
        for node in ast.walk(tree):
            names = []
            if isinstance(node, ast.ImportFrom) and node.module:
                names = [node.module, *(f"{node.module}.{alias.name}" for alias in node.names)]
            elif isinstance(node, ast.Import):
                names = [alias.name for alias in node.names]
            for name in names:
                target = folder_of(name)
                if target is not None and target != source:
                    edges[source].add(target)
    return edges


def folder_cycles(edges: dict[str, set[str]]) -> list[list[str]]:
    """The groups of folders that import each other, directly or round a loop (Tarjan's strongly connected
    components of two or more folders)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    cycles: list[list[str]] = []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        for target in sorted(edges.get(node, ())):
            if target not in index:
                visit(target)
                low[node] = min(low[node], low[target])
            elif target in stack:
                low[node] = min(low[node], index[target])
        if low[node] == index[node]:
            group = []
            while True:
                member = stack.pop()
                group.append(member)
                if member == node:
                    break
            if len(group) > 1:
                cycles.append(sorted(group))

    for node in sorted(edges):
        if node not in index:
            visit(node)
    return cycles


def test_msprobe_core_s_folders_import_each_other_in_one_direction():
    """The layers stay layers: the dump format below the diagnosis, the diagnosis below compare, the recording
    runtime above both. A folder that imports one that imports it back (round any loop) fails here."""
    assert folder_cycles(folder_imports(_sources())) == []


def test_the_cycle_check_sees_a_loop():
    assert folder_cycles({"dump": {"diagnosis"}, "diagnosis": {"compare"}, "compare": {"dump"}}) == [
        ["compare", "diagnosis", "dump"]
    ]
    assert folder_cycles({"dump": set(), "diagnosis": {"dump"}, "compare": {"diagnosis", "dump"}}) == []
    loop = [("msprobe.core.dump.flight", ast.parse("from msprobe.core.diagnosis import first_nonfinite")),
            ("msprobe.core.diagnosis.calls", ast.parse("from msprobe.core.dump.reader import Dump"))]  # fmt: skip
    assert ["diagnosis", "dump"] in folder_cycles(folder_imports(loop))
