"""Holds: due keys whose publish failed, each held back until its retry time (in memory: after a
restart every overdue message is simply tried again)."""

from __future__ import annotations

import heapq


class Holds:
    def __init__(self) -> None:
        self._held: set[bytes] = set()
        self._heap: list[tuple[int, bytes]] = []  # (retry at ms, key)

    def __contains__(self, key: bytes) -> bool:
        return key in self._held

    def __bool__(self) -> bool:
        return bool(self._held)

    def hold(self, keys: list[bytes], until_ms: int) -> None:
        for key in keys:
            self._held.add(key)
            heapq.heappush(self._heap, (until_ms, key))

    def release_due(self, now_ms: int) -> bytes | None:
        """Let go of every key whose retry time has come; returns the smallest of them."""
        lowest: bytes | None = None
        while self._heap and self._heap[0][0] <= now_ms:
            _, key = heapq.heappop(self._heap)
            self._held.discard(key)
            lowest = key if lowest is None else min(lowest, key)
        return lowest

    def next_ms(self) -> int | None:
        return self._heap[0][0] if self._heap else None
