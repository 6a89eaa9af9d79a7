"""The delay store's column families and their key layouts. Pure functions.

due      ``<due_ms:013d>:<id>``   -> DelayedMessage bytes   byte order == due-time order (Rock-DMQ's key)
index    ``<id> NUL <due_ms:013d>`` -> b""                  id -> its scheduled due keys
done     ``<id>``                 -> ``S|C <at_ms:013d>``   sent or cancelled, kept for the retention;
                                    then a detail (delay.done): where, topic, due time
expiry   ``<at_ms:013d>:<id>``    -> b""                    done markers in the order they expire
meta     storage.progress keys (clock high-water mark, seek floor)

The id is the tail of every key at a fixed offset, so ids need no escaping; an index entry is
exactly ``len(id) + 14`` bytes long, which tells entries of id ``a`` from those of id ``a\\0...``.
"""

from __future__ import annotations

from rocksidecar.storage.keys import DUE_WIDTH, due_prefix, parse_due

DUE_CF = "delay_due"
INDEX_CF = "delay_index"
DONE_CF = "delay_done"
EXPIRY_CF = "delay_done_expiry"
META_CF = "delay_meta"
COLUMN_FAMILIES = (DUE_CF, INDEX_CF, DONE_CF, EXPIRY_CF, META_CF)

SENT = b"S"
CANCELLED = b"C"
_ID_AT = DUE_WIDTH + 1  # where the id starts in a due or expiry key
_COLON = ord(":")


def due_key(due_ms: int, id_: str) -> bytes:
    """Raises ValueError for a due time outside [0, MAX_DUE_MS]."""
    return due_prefix(due_ms) + b":" + id_.encode()


def split_due_key(key: bytes) -> tuple[int, str]:
    """(due_ms, id) of a due or expiry key. Raises ValueError when ``key`` is not one."""
    head = key[:DUE_WIDTH]
    if len(key) <= _ID_AT or key[DUE_WIDTH] != _COLON or not head.isdigit():
        raise ValueError(f"not a delay key: {key!r}")
    try:
        return int(head), key[_ID_AT:].decode()
    except UnicodeDecodeError as exc:
        raise ValueError(f"not a delay key: {key!r}") from exc


def index_prefix(id_: str) -> bytes:
    return id_.encode() + b"\x00"


def index_key(id_: str, due_ms: int) -> bytes:
    return index_prefix(id_) + due_prefix(due_ms)


def index_dues(id_: str, entries: list[bytes]) -> list[int]:
    """Due times in the index entries (from a scan of ``index_prefix(id_)``) that belong to ``id_``."""
    prefix = index_prefix(id_)
    size = len(prefix) + DUE_WIDTH
    return [parse_due(e[len(prefix) :]) for e in entries if len(e) == size and e.startswith(prefix)]


def done_value(kind: bytes, at_ms: int, detail: bytes = b"") -> bytes:
    """A done marker: its kind, when, and optional ``detail`` bytes (where a SENT message was stored)."""
    return kind + due_prefix(at_ms) + detail


def split_done(value: bytes) -> tuple[bytes, int]:
    """(SENT or CANCELLED, at_ms) of a done marker. Raises ValueError for anything else."""
    kind = value[:1]
    if kind not in (SENT, CANCELLED):
        raise ValueError(f"not a done marker: {value!r}")
    return kind, parse_due(value[1 : 1 + DUE_WIDTH])


def done_detail(value: bytes) -> bytes:
    """The detail bytes of a done marker (b"" when there are none)."""
    return value[1 + DUE_WIDTH :]
