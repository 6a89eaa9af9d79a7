"""No import cycles anywhere in the product (issue 12 item 7): a cycle means two modules that cannot be
understood, tested or moved apart. grimp (which import-linter uses) builds the graph, imports inside
functions and under TYPE_CHECKING included."""

from __future__ import annotations

import grimp

PACKAGES = ("app", "rmq", "retry", "delay", "storage", "devbroker", "pipeline")


def cycles(graph: grimp.ImportGraph) -> list[frozenset[str]]:
    """The strongly connected sets of more than one module (Tarjan, iterative: the graph is deep)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[frozenset[str]] = []
    for root in sorted(graph.modules):
        if root in index:
            continue
        work = [(root, iter(sorted(graph.find_modules_directly_imported_by(root))))]
        index[root] = low[root] = len(index)
        stack.append(root)
        on_stack.add(root)
        while work:
            node, edges = work[-1]
            for nxt in edges:
                if nxt not in index:
                    index[nxt] = low[nxt] = len(index)
                    stack.append(nxt)
                    on_stack.add(nxt)
                    work.append((nxt, iter(sorted(graph.find_modules_directly_imported_by(nxt)))))
                    break
                if nxt in on_stack:
                    low[node] = min(low[node], index[nxt])
            else:
                work.pop()
                if work:
                    parent = work[-1][0]
                    low[parent] = min(low[parent], low[node])
                if low[node] == index[node]:
                    members = set()
                    while True:
                        member = stack.pop()
                        on_stack.discard(member)
                        members.add(member)
                        if member == node:
                            break
                    if len(members) > 1:
                        found.append(frozenset(members))
    return found


def test_the_detector_finds_a_cycle() -> None:
    graph = grimp.ImportGraph()
    for importer, imported in [("p.a", "p.b"), ("p.b", "p.c"), ("p.c", "p.a"), ("p.c", "p.d")]:
        graph.add_import(importer=importer, imported=imported)
    assert cycles(graph) == [frozenset({"p.a", "p.b", "p.c"})]


def test_no_import_cycles_in_the_product() -> None:
    found = set(cycles(grimp.build_graph(*PACKAGES)))
    assert not found, sorted(sorted(c) for c in found)
