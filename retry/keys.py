"""The retry store's column families and their key layouts. Pure functions.

pending  ``<due_ms:013d>:<retry_count>:<type>:<id>``  byte order == due-time order (the seed's layout)
index    ``<id> NUL p|w|d <pending, waiting or dead key>``  id -> where the message is now
dead     ``<dead_at_ms:013d>:<pending key>``          dead letters in the order they died
lanes    ``<topic> NUL <sharding key>``               a lane -> ``<head seq>:<tail seq>:<head's pending key>``
waiting  ``<lane> NUL <seq:020d> NUL <id>``           a lane's messages behind its head, in their order

A lane is a (topic, sharding key): its first message is pending (its head), the others wait in order
(retry.store). NUL is escaped in every field, so a lane key holds exactly one NUL and no lane key is
the start of another's waiting keys.

The due time is storage.keys' fixed-width 13-digit prefix (byte order == time order).
``:``, ``%`` and NUL in a type or id are percent-escaped so fields split unambiguously.
"""

from __future__ import annotations

from dataclasses import dataclass

from rocksidecar.storage.keys import DUE_WIDTH, clamp_due, due_prefix

PENDING_CF = "retry_pending"
INDEX_CF = "retry_index"
DEAD_CF = "retry_dead"
META_CF = "retry_meta"
LANES_CF = "retry_lanes"
WAITING_CF = "retry_waiting"
COLUMN_FAMILIES = (PENDING_CF, INDEX_CF, DEAD_CF, META_CF, LANES_CF, WAITING_CF)

PENDING = b"p"
WAITING = b"w"
DEAD = b"d"
SEQ_WIDTH = 20  # a lane's sequence numbers, zero-padded: byte order == their order
_ESCAPES = (("%", "%25"), (":", "%3A"), ("\x00", "%00"))


@dataclass(frozen=True, slots=True)
class PendingKey:
    due_ms: int
    retry_count: int
    type: str
    id: str


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
    return due_prefix(due_ms) + f":{retry_count}:{_escape(type_)}:{_escape(id_)}".encode()


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


def index_prefix(id_: str) -> bytes:
    return _escape(id_).encode() + b"\x00"


def index_key(id_: str, kind: bytes, key: bytes) -> bytes:
    return index_prefix(id_) + kind + key


def split_index_key(index: bytes) -> tuple[bytes, bytes]:
    """(kind, pending or dead key) of an index key."""
    _, _, rest = index.partition(b"\x00")
    return rest[:1], rest[1:]


def dead_key(dead_at_ms: int, pending: bytes) -> bytes:
    return due_prefix(clamp_due(dead_at_ms)) + b":" + pending


def pending_of_dead(key: bytes) -> bytes:
    return key[DUE_WIDTH + 1 :]


@dataclass(slots=True)
class Lane:
    """A lane's entry: its head's sequence number and pending key, and its last waiting one's number (the
    KV seeks forwards only: the tail is kept here, not looked for)."""

    head_seq: int
    tail_seq: int
    head: bytes


def lane_key(topic: str, sharding_key: str) -> bytes:
    return f"{_escape(topic)}\x00{_escape(sharding_key)}".encode()


def encode_lane(lane: Lane) -> bytes:
    return b"%d:%d:" % (lane.head_seq, lane.tail_seq) + lane.head


def decode_lane(raw: bytes) -> Lane:
    """Raises ValueError for bytes encode_lane did not make."""
    head_seq, tail_seq, head = raw.split(b":", 2)
    return Lane(int(head_seq), int(tail_seq), head)


def waiting_key(lane: bytes, seq: int, id_: str) -> bytes:
    return lane + b"\x00%020d\x00" % seq + _escape(id_).encode()


def waiting_bounds(lane: bytes) -> tuple[bytes, bytes]:
    """[lower, upper) of ``lane``'s waiting keys."""
    return lane + b"\x00", lane + b"\x01"


def waiting_after(lane: bytes, seq: int) -> bytes:
    """The lower bound of ``lane``'s waiting keys whose sequence number is above ``seq``."""
    return lane + b"\x00%020d" % (seq + 1)


def split_waiting_key(key: bytes) -> tuple[bytes, int, str]:
    """(lane, seq, id) of a waiting key; raises ValueError when ``key`` is not one."""
    try:
        topic, sharding_key, seq, id_ = key.split(b"\x00")
        if len(seq) != SEQ_WIDTH:
            raise ValueError("sequence width")
        return topic + b"\x00" + sharding_key, int(seq), _unescape(id_.decode())
    except (UnicodeDecodeError, ValueError) as exc:
        raise ValueError(f"not a waiting key: {key!r}") from exc
