"""The stores' import graph: retry.dead_letters no longer imports retry.store (issue 12: the
retry/dead_letters.py <-> retry/store.py cycle), and the due-queue engine imports neither store."""

from __future__ import annotations

import grimp


def test_no_import_cycle_between_the_stores_modules() -> None:
    graph = grimp.build_graph("retry", "delay", "storage")
    assert (
        graph.find_shortest_chain(
            importer="rocksidecar.retry.store", imported="rocksidecar.retry.dead_letters"
        )
        is not None
    )
    assert (
        graph.find_shortest_chain(
            importer="rocksidecar.retry.dead_letters", imported="rocksidecar.retry.store"
        )
        is None
    )
    for package in ("retry", "delay", "storage"):
        cyclic = [
            (a, b)
            for a in graph.find_children(package) | {package}
            for b in graph.find_modules_directly_imported_by(a)
            if graph.find_shortest_chain(importer=b, imported=a) is not None
        ]
        assert cyclic == [], f"import cycles in {package}: {cyclic}"


def test_the_engine_imports_no_store() -> None:
    graph = grimp.build_graph("retry", "delay", "storage")
    for engine in (
        "rocksidecar.storage.due_queue",
        "rocksidecar.storage.due_loop",
        "rocksidecar.storage.message",
        "rocksidecar.storage.claims",
    ):
        for store in ("retry", "delay"):
            assert graph.find_shortest_chain(importer=engine, imported=store) is None
