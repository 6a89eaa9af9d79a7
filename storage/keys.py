"""Due-time key prefixes shared by the retry and delay stores: fixed-width milliseconds, so that byte
order equals time order.

Why 13 digits: milliseconds since 1970 have had 13 digits since 2001-09-09 and keep them until
2286-11-20, so a fixed width of 13 keeps byte order equal to numeric order for every due time the
sidecar can produce (due times are clamped into [0, 10**13)); wider keys would only cost bytes.
"""

from __future__ import annotations

DUE_WIDTH = 13
MAX_DUE_MS: int = 10**DUE_WIDTH - 1


def clamp_due(due_ms: int) -> int:
    return min(max(due_ms, 0), MAX_DUE_MS)


def due_prefix(due_ms: int) -> bytes:
    """``due_ms`` as the 13 digits a key starts with.

    Raises:
        ValueError: ``due_ms`` is outside [0, MAX_DUE_MS].
    """
    if not 0 <= due_ms <= MAX_DUE_MS:
        raise ValueError(f"due time {due_ms} ms is outside [0, {MAX_DUE_MS}]")
    return b"%013d" % due_ms


def parse_due(key: bytes) -> int:
    """The due time a key starts with. Raises ValueError when it does not start with 13 digits."""
    head = key[:DUE_WIDTH]
    if len(head) != DUE_WIDTH or not head.isdigit():
        raise ValueError(f"no due time at the start of {key!r}")
    return int(head)


def due_bound(now_ms: int) -> bytes:
    """Exclusive upper bound: every key due at or before ``now_ms`` sorts below it."""
    if now_ms >= MAX_DUE_MS:
        return b"\xff"  # above every key (keys start with digits)
    return b"%013d" % max(now_ms + 1, 0)
