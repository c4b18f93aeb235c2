"""Where the diagnosis says two runs part ways, as nodes of the graph page.

The graph decides nothing itself: :mod:`msprobe.core.diagnosis` answers, and the page marks the call it
names ("api") and its module ("module"), which the First suspect button opens the tree down to.
"""

from __future__ import annotations

from msprobe.core.diagnosis import Diagnosis
from msprobe.core.diagnosis.calls import module_path
from msprobe.core.graph.model import Graph


def located_nodes(graph: Graph, diagnosis: Diagnosis | None) -> dict[str, str]:
    """Node id -> "api" or "module" for the diagnosis's call and module, where the graph holds them."""
    if diagnosis is None or diagnosis.verdict != "divergence":
        return {}
    located: dict[str, str] = {}
    if diagnosis.api and diagnosis.api in graph.nodes:
        located[diagnosis.api] = "api"
    module = _module_node(graph, diagnosis)
    if module is not None:
        located[module] = "module"
    return located


def _module_node(graph: Graph, diagnosis: Diagnosis) -> str | None:
    """The module's node: among the named call's ancestors first, else its first forward node."""
    if diagnosis.module is None:
        return None
    chain = graph.ancestors(diagnosis.api) if diagnosis.api and diagnosis.api in graph.nodes else []
    for node_id in reversed(chain):
        found = module_path(node_id)
        if found is not None and found[0] == diagnosis.module:
            return node_id
    for node in graph.preorder():
        found = module_path(node.id)
        if found is not None and found[0] == diagnosis.module and ".forward." in node.id:
            return node.id
    return None
