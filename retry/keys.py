"""The retry store's column families and their key layouts. Pure functions.

pending  ``<due_ms:013d>:<retry_count>:<type>:<id>``  byte order == due-time order (the seed's layout)
index    ``<id> NUL p|d <pending or dead key>``      id -> where the message is now
dead     ``<dead_at_ms:013d>:<pending key>``          dead letters in the order they died

Why 13 digits: milliseconds since 1970 have had 13 digits since 2001-09-09 and keep them until
2286-11-20, so a fixed width of 13 keeps byte order equal to numeric order for every due time the
sidecar can produce (due times are clamped into [0, 10**13)); wider keys would only cost bytes.
``:``, ``%`` and NUL in a type or id are percent-escaped so fields split unambiguously.
"""

from __future__ import annotations

from dataclasses import dataclass

PENDING_CF = "retry_pending"
INDEX_CF = "retry_index"
DEAD_CF = "retry_dead"
META_CF = "retry_meta"
COLUMN_FAMILIES = (PENDING_CF, INDEX_CF, DEAD_CF, META_CF)

DUE_WIDTH = 13
MAX_DUE_MS: int = 10**DUE_WIDTH - 1
PENDING = b"p"
DEAD = b"d"
_ESCAPES = (("%", "%25"), (":", "%3A"), ("\x00", "%00"))


@dataclass(frozen=True, slots=True)
class PendingKey:
    due_ms: int
    retry_count: int
    type: str
    id: str


def clamp_due(due_ms: int) -> int:
    return min(max(due_ms, 0), MAX_DUE_MS)


def _escape(text: str) -> str:
    if "%" not in text and ":" not in text and "\x00" not in text:
        return text  # the usual case, on the spool path
    for raw, escaped in _ESCAPES:
        text = text.replace(raw, escaped)
    return text


def _unescape(text: str) -> str:
    if "%" not in text:
        return text
    for raw, escaped in reversed(_ESCAPES):
        text = text.replace(escaped, raw)
    return text


def pending_key(due_ms: int, retry_count: int, type_: str, id_: str) -> bytes:
    if not 0 <= due_ms <= MAX_DUE_MS:
        raise ValueError(f"due time {due_ms} ms is outside [0, {MAX_DUE_MS}]")
    return f"{due_ms:0{DUE_WIDTH}d}:{retry_count}:{_escape(type_)}:{_escape(id_)}".encode()


def parse_pending_key(key: bytes) -> PendingKey:
    """Raises ValueError when ``key`` is not a pending key."""
    try:
        due, count, type_, id_ = key.decode().split(":")
        if len(due) != DUE_WIDTH:
            raise ValueError("due time width")
        return PendingKey(int(due), int(count), _unescape(type_), _unescape(id_))
    except (UnicodeDecodeError, ValueError) as exc:
        raise ValueError(f"not a retry key: {key!r}") from exc


def id_of(key: bytes) -> str | None:
    """The message id in a pending key (its last field), or None if ``key`` is not one."""
    head, sep, escaped = key.rpartition(b":")
    if not sep or head.count(b":") != 2 or len(head) <= DUE_WIDTH or not escaped:
        return None
    try:
        return _unescape(escaped.decode())
    except UnicodeDecodeError:
        return None


def due_bound(now_ms: int) -> bytes:
    """Exclusive upper bound: every key due at or before ``now_ms`` sorts below it."""
    if now_ms >= MAX_DUE_MS:
        return b"\xff"  # above every key (keys start with digits)
    return f"{max(now_ms + 1, 0):0{DUE_WIDTH}d}".encode()


def index_prefix(id_: str) -> bytes:
    return _escape(id_).encode() + b"\x00"


def index_key(id_: str, kind: bytes, key: bytes) -> bytes:
    return index_prefix(id_) + kind + key


def split_index_key(index: bytes) -> tuple[bytes, bytes]:
    """(kind, pending or dead key) of an index key."""
    _, _, rest = index.partition(b"\x00")
    return rest[:1], rest[1:]


def dead_key(dead_at_ms: int, pending: bytes) -> bytes:
    return f"{clamp_due(dead_at_ms):0{DUE_WIDTH}d}:".encode() + pending


def pending_of_dead(key: bytes) -> bytes:
    return key[DUE_WIDTH + 1 :]
