"""Filtered, paged listings over due-time-first column families (retry pending and dead letters,
scheduled delayed messages), for the admin API and the CLI.

Keys start with the due time (storage.keys), so due-before/after filters are key bounds; topic and type
filters need the decoded value. A page stops after ``limit`` matches, after ``scan_budget`` keys read or
once the values read pass ``byte_budget`` bytes, whichever comes first, and returns a cursor (the last
key read) to continue from, so a filter that matches nothing never reads a whole large store in one
request, and a page of large bodies (up to 64 MiB each) never reads thousands of them at once. A page
may so hold fewer than ``limit`` items with a cursor: ``limit`` is a maximum.
"""

from __future__ import annotations

import base64
import binascii
import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import Generic, TypeVar

from .keys import MAX_DUE_MS, due_bound, due_prefix
from .kv import KV
from .message import CorruptValueError, StoredMessage

SCAN_BUDGET = 10_000
PAGE_BYTES = 64 * 1024 * 1024  # values read per page (the decoder should keep no bodies: see page)
# A cursor is a key: a retry store's waiting key holds a sharding key (1 024 characters, up to 4 KiB).
_CURSOR = re.compile(r"[A-Za-z0-9_-]{2,8192}")
T = TypeVar("T")
M = TypeVar("M", bound=StoredMessage)


@dataclass(frozen=True, slots=True)
class Filter:
    topic: str | None = None
    type: str | None = None
    due_after_ms: int | None = None  # inclusive
    due_before_ms: int | None = None  # exclusive

    @property
    def on_message(self) -> bool:
        """Whether it filters on what only the decoded value says (topic, type)."""
        return self.topic is not None or self.type is not None

    def matches(self, topic: str | None, type_: str | None) -> bool:
        return (self.topic is None or topic == self.topic) and (self.type is None or type_ == self.type)


@dataclass(frozen=True, slots=True)
class Page(Generic[T]):
    items: list[T]
    cursor: str | None  # None: nothing more


def encode_cursor(key: bytes) -> str:
    return base64.urlsafe_b64encode(key).decode().rstrip("=")


def decode_cursor(cursor: str) -> bytes:
    """Raises ValueError for anything encode_cursor did not make."""
    try:
        if not _CURSOR.fullmatch(cursor):
            raise ValueError("unexpected characters")
        return base64.urlsafe_b64decode(cursor + "=" * (-len(cursor) % 4))
    except (binascii.Error, ValueError) as exc:
        raise ValueError(f"not a cursor from a previous page: {cursor!r}") from exc


def page(
    kv: KV,
    cf: str,
    where: Filter,
    decode: Callable[[bytes, bytes], T | None],
    *,
    cursor: str | None = None,
    limit: int = 100,
    scan_budget: int = SCAN_BUDGET,
    byte_budget: int = PAGE_BYTES,
    below: bytes | None = None,
    above: bytes | None = None,
) -> Page[T]:
    """Items of ``cf`` in key order that ``decode(key, value)`` turns into something (None: the filter
    did not match), keys below ``below`` and from ``above`` on only when given. Raises ValueError for a
    bad cursor.

    Values are read one at a time (an iterator, not a scan of a thousand values at once), so what a
    page holds is what ``decode`` keeps of each: a listing that shows a body's length should keep the
    length, not the body."""
    lower = due_prefix(min(max(where.due_after_ms or 0, 0), MAX_DUE_MS))
    if above is not None:
        lower = max(lower, above)
    if cursor is not None:
        lower = max(lower, decode_cursor(cursor) + b"\x00")
    upper = None if where.due_before_ms is None else due_bound(where.due_before_ms - 1)
    if below is not None:
        upper = below if upper is None else min(upper, below)
    items: list[T] = []
    size = 0
    last: bytes | None = None
    for read, (key, value) in enumerate(kv.iterate(cf, lower=lower, upper=upper)):  # read: keys read so far
        # Checked before this key is read: it is the proof there is more. The first key is always read
        # (a page moves on by one at least, whatever the budgets).
        if last is not None and (len(items) >= limit or read >= scan_budget or size >= byte_budget):
            return Page(items, encode_cursor(last))
        size += len(value)
        last = key
        item = decode(key, value)
        if item is not None:
            items.append(item)
    return Page(items, None)


def due_messages(
    where: Filter,
    split_key: Callable[[bytes], tuple[int, str]],
    decode: Callable[[bytes], M],
    item: Callable[[bytes, str, int, M | None, str | None], T],
) -> Callable[[bytes, bytes], T | None]:
    """A ``page`` decoder for a column family of messages under due keys: ``item(key, id, due_ms,
    message, why_corrupt)`` for each one ``where`` matches. A key ``split_key`` rejects (ValueError) is
    skipped; a value that does not decode is listed, with why and no message, only when ``where`` does
    not filter on the message (its topic and type are unknown)."""

    def listed(key: bytes, raw: bytes) -> T | None:
        try:
            due_ms, id_ = split_key(key)
        except ValueError:
            return None
        try:
            msg = decode(raw)
        except CorruptValueError as exc:
            return None if where.on_message else item(key, id_, due_ms, None, str(exc))
        return item(key, id_, due_ms, msg, None) if where.matches(msg.topic, msg.type) else None

    return listed
