"""A bounded memo: what the encoders keep of values that repeat (attributes, queues, tags)."""

from __future__ import annotations

from typing import TypeVar

K = TypeVar("K")
V = TypeVar("V")


def remember(cache: dict[K, V], key: K, value: V, limit: int) -> V:
    """``value`` kept in ``cache`` under ``key`` and returned. A full cache (``limit`` entries) starts
    again rather than evicting one by one: its keys are few in use, and a storm of distinct ones (message
    ids, hostile tags) only costs a rebuild. Called on a miss only, so a hit stays a dict read inline."""
    if len(cache) >= limit:
        cache.clear()
    cache[key] = value
    return value
