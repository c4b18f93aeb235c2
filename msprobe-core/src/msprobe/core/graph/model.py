"""The model hierarchy of one dump: modules as nodes, the APIs they called as leaves.

construct.json gives each entry's parent (``null`` for top level). Two or more
top-level APIs that ran between two modules are grouped into
``Apis_Between_Modules.N`` nodes, as the reference does (a single one hangs
from the root), so the root lists the model's blocks in call order. A dump
with an empty construct.json (level L1) still gives a graph: every API hangs
under those groups.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from msprobe.core.compare.rows import Row, dump_rows
from msprobe.core.dump.reader import Dump
from msprobe.core.errors import DataFileError

ROOT = "DefaultModel"
BETWEEN_MODULES = "Apis_Between_Modules"

# The reference's node_type codes.
MODULE = 0
API = 1
API_GROUP = 9

# Frames that say where the framework called itself, not where the user's code did.
_FRAMEWORK_FRAMES = ("msprobe", "torch/nn/modules/module.py", "mindspore/nn/cell.py")


@dataclass
class Node:
    id: str
    node_type: int
    upnode: str | None = None
    subnodes: list[str] = field(default_factory=list)
    inputs: list[Row] = field(default_factory=list)
    outputs: list[Row] = field(default_factory=list)
    stack_info: list[str] = field(default_factory=list)
    micro_step_id: int | None = None
    data: dict[str, Any] = field(default_factory=dict)
    matched: str | None = None  # the partner's id in the other graph
    matched_link: list[str] = field(default_factory=list)

    @property
    def has_data(self) -> bool:
        return bool(self.inputs or self.outputs)


@dataclass
class Graph:
    dump: Dump
    nodes: dict[str, Node]
    root: str = ROOT
    micro_steps: int = 1

    def __getitem__(self, node_id: str) -> Node:
        return self.nodes[node_id]

    def preorder(self) -> list[Node]:
        """Every node, parents before children, children in call order."""
        ordered: list[Node] = []
        pending = [self.root]
        while pending:
            node = self.nodes[pending.pop()]
            ordered.append(node)
            pending.extend(reversed(node.subnodes))
        return ordered

    def ancestors(self, node_id: str) -> list[str]:
        """From the root down to ``node_id`` itself."""
        chain = []
        current: str | None = node_id
        while current is not None and current in self.nodes:
            chain.append(current)
            current = self.nodes[current].upnode
        return chain[::-1]


def _is_module(name: str) -> bool:
    return name.startswith(("Module.", "Cell.")) or name == "optimizer"


def simplified_stack(frames: Any) -> list[str]:
    """The first frame outside the framework's own call machinery (the reference's short stack)."""
    if not isinstance(frames, list):
        return []
    for frame in frames:
        text = str(frame)
        if not any(marker in text.split(",", 1)[0] for marker in _FRAMEWORK_FRAMES):
            return [text]
    return [str(frames[-1])] if frames else []


def _stack_for(dump: Dump, name: str) -> Any:
    frames = dump.stack.get(name)
    if frames is None and ".backward" in name:
        frames = dump.stack.get(name.replace(".backward", ".forward"))
    return frames


def _adopt_backward_apis(parent_of: dict[str, str | None]) -> None:
    """A backward API recorded without a parent belongs to the backward of its forward's module."""
    for name, parent in parent_of.items():
        if parent is not None or not name.endswith(".backward") or _is_module(name):
            continue
        forward_parent = parent_of.get(name[: -len("backward")] + "forward")
        if forward_parent and ".forward." in forward_parent:
            twin = forward_parent.replace(".forward.", ".backward.")
            if twin in parent_of:
                parent_of[name] = twin


def _refuse_cycles(parent_of: dict[str, str | None], dump: Dump) -> None:
    """A damaged construct.json can make an entry its own ancestor; say so instead of looping."""
    settled: set[str] = set()
    for name in parent_of:
        chain: list[str] = []
        current: str | None = name
        while current is not None and current not in settled:
            if current in chain:
                raise DataFileError(dump.folder / "construct.json", f"'{current}' is its own ancestor")
            chain.append(current)
            current = parent_of.get(current)
        settled.update(chain)


def _attach_rows(nodes: dict[str, Node], dump: Dump) -> None:
    for row in dump_rows(dump):
        node = nodes.get(row.entry)
        if node is None:
            continue  # parameters_grad entries are not nodes (as in the reference)
        (node.outputs if row.role == "output" else node.inputs).append(row)


def build_graph(dump: Dump, complete_stack: bool = False) -> Graph:
    """The hierarchy of one dump folder, in call order."""
    nodes: dict[str, Node] = {ROOT: Node(ROOT, MODULE)}
    order: list[str] = []  # first appearance, as an entry or as somebody's parent
    parent_of: dict[str, str | None] = {}

    def see(name: str) -> None:
        if name not in parent_of:
            parent_of[name] = None
            order.append(name)

    for name, parent in dump.construct.items():
        if parent:
            see(str(parent))
        see(name)
        parent_of[name] = str(parent) if parent else None
    for name in dump.data:
        if not name.endswith(".parameters_grad"):
            see(name)
    _adopt_backward_apis(parent_of)
    _refuse_cycles(parent_of, dump)

    group: Node | None = None
    groups = 0
    for name in order:
        node = Node(name, MODULE if _is_module(name) else API)
        frames = _stack_for(dump, name)
        node.stack_info = [str(f) for f in frames] if complete_stack and isinstance(frames, list) else []
        if not complete_stack:
            node.stack_info = simplified_stack(frames)
        nodes[name] = node
        parent = parent_of[name]
        if parent is None and node.node_type == API:
            if group is None:
                group = Node(f"{BETWEEN_MODULES}.{groups}", API_GROUP, upnode=ROOT)
                groups += 1
                nodes[group.id] = group
                nodes[ROOT].subnodes.append(group.id)
            parent = group.id
        elif parent is None:
            group = None
            parent = ROOT
        node.upnode = parent
    for name in order:
        parent_id = nodes[name].upnode or ROOT
        if parent_id not in nodes:  # a parent named in construct.json but never recorded itself
            nodes[parent_id] = Node(parent_id, MODULE, upnode=ROOT)
            nodes[ROOT].subnodes.append(parent_id)
        nodes[parent_id].subnodes.append(name)
    _dissolve_single_api_groups(nodes)
    _restore_root_order(nodes, order)
    _attach_rows(nodes, dump)
    graph = Graph(dump, nodes)
    graph.micro_steps = _number_micro_steps(graph)
    return graph


def _dissolve_single_api_groups(nodes: dict[str, Node]) -> None:
    """As the reference: an API alone between two modules hangs from the root itself; only runs of two or more
    become ``Apis_Between_Modules.N`` nodes, numbered in call order."""
    groups = [node for node in nodes.values() if node.node_type == API_GROUP]
    root = nodes[ROOT]
    number = 0
    for group in groups:
        del nodes[group.id]
        if len(group.subnodes) == 1:
            child = group.subnodes[0]
            nodes[child].upnode = ROOT
            root.subnodes[root.subnodes.index(group.id)] = child
            continue
        old_id, group.id = group.id, f"{BETWEEN_MODULES}.{number}"
        number += 1
        nodes[group.id] = group
        root.subnodes[root.subnodes.index(old_id)] = group.id
        for child in group.subnodes:
            nodes[child].upnode = group.id


def _restore_root_order(nodes: dict[str, Node], order: list[str]) -> None:
    """Top-level children in call order, with each API group where its first API ran."""
    position = {name: index for index, name in enumerate(order)}
    for node in nodes.values():
        if node.node_type == API_GROUP and node.subnodes:
            position[node.id] = position[node.subnodes[0]]
    nodes[ROOT].subnodes.sort(key=lambda name: position.get(name, len(position)))


def _number_micro_steps(graph: Graph) -> int:
    """A new micro-step starts when a forward module follows a backward one at the top level."""
    micro = 0
    seen_backward = False
    for name in graph[graph.root].subnodes:
        if ".backward" in name and name.startswith(("Module.", "Cell.")):
            seen_backward = True
        elif ".forward" in name and name.startswith(("Module.", "Cell.")) and seen_backward:
            micro += 1
            seen_backward = False
        graph[name].micro_step_id = micro
    return micro + 1
