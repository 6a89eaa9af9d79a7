"""Committed consumer offsets per (group, topic, queue). With a path they are saved on flush in the
layout of Java's consumerOffset.json (``{"offsetTable": {"topic@group": {"0": 12}}}``)."""

from __future__ import annotations

from pathlib import Path

from .jsonfile import read_json, write_json


class ConsumerOffsets:
    def __init__(self, path: Path | None = None) -> None:
        self._path = path
        self._table: dict[tuple[str, str, int], int] = {}
        self._dirty = False
        if path is not None:
            for key, queues in ((read_json(path) or {}).get("offsetTable") or {}).items():
                topic, _, group = key.rpartition("@")
                for queue_id, offset in queues.items():
                    self._table[(group, topic, int(queue_id))] = int(offset)

    def commit(self, group: str, topic: str, queue_id: int, offset: int) -> None:
        self._table[(group, topic, queue_id)] = offset
        self._dirty = True

    def query(self, group: str, topic: str, queue_id: int) -> int | None:
        """The committed offset, or None when the group never committed one for this queue."""
        return self._table.get((group, topic, queue_id))

    def groups(self) -> list[str]:
        return sorted({g for g, _, _ in self._table})

    def flush(self) -> None:
        """Save to the path, if there is one and anything changed since the last flush."""
        if self._path is None or not self._dirty:
            return
        doc: dict[str, dict[str, int]] = {}
        for (group, topic, queue_id), offset in self._table.items():
            doc.setdefault(f"{topic}@{group}", {})[str(queue_id)] = offset
        write_json(self._path, {"offsetTable": doc})
        self._dirty = False
