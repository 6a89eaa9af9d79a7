"""``rocksidecar store``: retry.cli's command, with the delay store's scheduled messages added to
``stats`` and ``inspect`` (retry and delay do not import each other; this module joins them)."""

from __future__ import annotations

import argparse
from collections.abc import Callable
from datetime import UTC, datetime

from rocksidecar.delay import DelayStore
from rocksidecar.retry import cli
from rocksidecar.storage.errors import StorageError
from rocksidecar.storage.group_commit import GroupCommitWriter
from rocksidecar.storage.kv import KV


def _iso(ms: int) -> str:
    return datetime.fromtimestamp(ms / 1000, UTC).isoformat(timespec="milliseconds")


def scheduled(kv: KV) -> tuple[list[str], Callable[[str], dict[str, object] | None]] | None:
    """Stats lines and a lookup by id of the scheduled messages in ``kv``; None if it has no delay store
    (a store written by the retry store alone)."""
    try:
        store = DelayStore(kv, GroupCommitWriter(kv))
        stats = store.stats()
    except (StorageError, KeyError, ValueError):
        return None
    lines = [f"scheduled: {stats.pending}"]
    if stats.next_due_ms is not None:
        lines.append(f"next scheduled due: {_iso(stats.next_due_ms)}")

    def lookup(id_: str) -> dict[str, object] | None:
        found = store.get(id_)
        if found is None:
            return None
        return {
            "id": id_,
            "state": found.state.value,
            "due_ms": found.due_ms,
            "at_ms": found.at_ms,
            "topic": found.topic,
        }

    return lines, lookup


def register(sub: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    cli.register(sub, scheduled=scheduled)
