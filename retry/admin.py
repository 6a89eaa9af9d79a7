"""What the admin API and the CLI ask of a running retry store: filtered, paged listings of pending
messages (those waiting behind their lane's head included) and dead letters, re-drive by filter, and
purge."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from dataclasses import dataclass, replace

from rocksidecar.storage.keys import DUE_WIDTH, due_prefix
from rocksidecar.storage.query import (
    PAGE_BYTES,
    SCAN_BUDGET,
    Filter,
    Page,
    decode_cursor,
    due_messages,
    encode_cursor,
    page,
)

from .dead_letter import DeadLetter, decode_dead
from .keys import DEAD_CF, PENDING_CF, WAITING_CF, parse_pending_key, pending_of_dead, split_waiting_key
from .record import CorruptRecordError, RetryRecord, decode_record
from .store import RetryStore

# The listings show a body's length, never the body, and purge and redrive need only keys: an item
# keeps its record without the body (b""), and ``body_bytes``. Kept whole, a page of 1000 held every
# body at once (4 GB at the default 4 MiB limit, 64 GB at 64 MiB); this way only the one being decoded.


def _bodiless(record: RetryRecord) -> RetryRecord:
    return replace(record, body=b"")


@dataclass(frozen=True, slots=True)
class PendingItem:
    """A pending retry as the admin views list it: pending, or waiting behind its lane's head
    (``waiting``: its key is a waiting key, its due time the head's)."""

    key: bytes
    id: str
    due_ms: int
    record: RetryRecord | None  # without its body; None: the value does not decode (see corrupt)
    corrupt: str | None = None
    body_bytes: int = 0  # the length of the record's body
    waiting: bool = False

    @classmethod
    def of(
        cls,
        key: bytes,
        id_: str,
        due_ms: int,
        record: RetryRecord | None,
        corrupt: str | None,
        waiting: bool = False,
    ) -> PendingItem:
        if record is None:
            return cls(key, id_, due_ms, None, corrupt, waiting=waiting)
        return cls(key, id_, due_ms, _bodiless(record), corrupt, len(record.body), waiting)


@dataclass(frozen=True, slots=True)
class DeadItem:
    """A dead letter as the admin views list it (retry.dead_letter.DeadLetter without its bytes)."""

    key: bytes
    id: str
    reason: str
    dead_at_ms: int
    record: RetryRecord | None  # without its body; None: the letter's bytes are not a record
    body_bytes: int = 0  # the length of the record's body

    @classmethod
    def of(cls, letter: DeadLetter) -> DeadItem:
        record = letter.record
        if record is None:
            return cls(letter.key, letter.id, letter.reason, letter.dead_at_ms, None)
        return cls(
            letter.key, letter.id, letter.reason, letter.dead_at_ms, _bodiless(record), len(record.body)
        )


PURGE_CHUNK = 1000


def _pending_key(key: bytes) -> tuple[int, str]:
    parsed = parse_pending_key(key)
    return parsed.due_ms, parsed.id


def _dead(where: Filter) -> Callable[[bytes, bytes], DeadItem | None]:
    def decode(key: bytes, raw: bytes) -> DeadItem | None:
        letter = decode_dead(key, raw)
        record = letter.record
        if where.on_message and record is None:
            return None
        if record is not None and not where.matches(record.topic, record.type):
            return None
        return DeadItem.of(letter)

    return decode


# A cursor into the waiting messages starts with this byte, which no pending key does (they start with
# their due time's digits).
WAITING_MARK = b"\xff"


def pending_page(
    store: RetryStore, where: Filter, *, cursor: str | None = None, limit: int = 100
) -> Page[PendingItem]:
    """Pending messages in due-time order (``due_*`` filter the next attempt time), then the messages
    waiting behind their lane's head, lane by lane in their order (their next attempt: their head's).
    Raises ValueError for a bad cursor."""
    raw = None if cursor is None else decode_cursor(cursor)
    if raw is not None and raw.startswith(WAITING_MARK):
        return _waiting_page(store, where, raw[1:], limit)
    listed = due_messages(where, _pending_key, decode_record, PendingItem.of)
    found = page(store.kv, PENDING_CF, where, listed, cursor=cursor, limit=limit)
    if found.cursor is not None:
        return found
    more = _waiting_page(store, where, b"", limit - len(found.items))
    return Page(found.items + more.items, more.cursor)


def _waiting_page(store: RetryStore, where: Filter, after: bytes, limit: int) -> Page[PendingItem]:
    """Up to ``limit`` waiting messages ``where`` matches, with keys after ``after`` (b"": from the first),
    as storage.query.page reads (its budgets, a cursor to go on from); their due time is their head's,
    filtered here (their keys do not start with one)."""
    lower = after + b"\x00" if after else None
    if limit <= 0:  # the pending ones filled the page: the next one starts here, if there is anything
        more = store.kv.scan(WAITING_CF, lower=lower, limit=1)
        return Page([], encode_cursor(WAITING_MARK + after) if more else None)
    items: list[PendingItem] = []
    heads: dict[bytes, int] = {}  # lane -> its head's due time, read once a page
    size = 0
    last: bytes | None = None
    for read, (key, value) in enumerate(store.kv.iterate(WAITING_CF, lower=lower)):
        if last is not None and (len(items) >= limit or read >= SCAN_BUDGET or size >= PAGE_BYTES):
            return Page(items, encode_cursor(WAITING_MARK + last))
        size += len(value)
        last = key
        item = _waiting_item(store, where, key, value, heads)
        if item is not None:
            items.append(item)
    return Page(items, None)


def _waiting_item(
    store: RetryStore, where: Filter, key: bytes, raw: bytes, heads: dict[bytes, int]
) -> PendingItem | None:
    try:
        lane, _, id_ = split_waiting_key(key)
    except ValueError:
        return None
    due = heads.get(lane)
    if due is None:
        due = heads[lane] = store.waiting_due(key)
    if (where.due_after_ms is not None and due < where.due_after_ms) or (
        where.due_before_ms is not None and due >= where.due_before_ms
    ):
        return None
    try:
        record = decode_record(raw)
    except CorruptRecordError as exc:
        return None if where.on_message else PendingItem.of(key, id_, due, None, str(exc), True)
    if not where.matches(record.topic, record.type):
        return None
    return PendingItem.of(key, id_, due, record, None, True)


def dead_page(
    store: RetryStore, where: Filter, *, cursor: str | None = None, limit: int = 100
) -> Page[DeadItem]:
    """Dead letters in the order they died (``due_*`` filter the time they died)."""
    return page(store.kv, DEAD_CF, where, _dead(where), cursor=cursor, limit=limit)


@dataclass(frozen=True, slots=True)
class Redriven:
    """What one redrive call did; ``cursor`` (None: done) continues a call that ran out of time."""

    moved: int
    skipped: int  # corrupt, or gone meanwhile
    cursor: str | None


REDRIVE_DEADLINE_S = 10.0  # a caller's request answers within this, with a cursor if unfinished


def _redrive_cursor(stop_ms: int, key: bytes) -> str:
    return encode_cursor(due_prefix(stop_ms) + key)


def _parse_redrive_cursor(cursor: str) -> tuple[int, bytes]:
    """Raises ValueError for anything _redrive_cursor did not make."""
    raw = decode_cursor(cursor)
    head = raw[:DUE_WIDTH]
    if len(raw) < DUE_WIDTH + 2 or not head.isdigit():
        raise ValueError(f"not a cursor from a previous redrive: {cursor!r}")
    return int(head), raw[DUE_WIDTH:]


def _redriven_here(dkey: bytes, stop_ms: int) -> bool:
    """Whether a letter of the start millisecond may be one this redrive moved and saw die again: it
    died from a first attempt due in that millisecond, as a re-driven letter is (retry count 0, due
    now). One spooled and dead so within that millisecond waits for the next call."""
    if dkey[:DUE_WIDTH] != due_prefix(stop_ms):
        return False
    try:
        parsed = parse_pending_key(pending_of_dead(dkey))
    except ValueError:
        return False
    return parsed.due_ms == stop_ms and parsed.retry_count == 0


async def redrive(
    store: RetryStore,
    where: Filter,
    *,
    cursor: str | None = None,
    deadline_s: float = REDRIVE_DEADLINE_S,
    clock: Callable[[], float] = time.monotonic,
) -> Redriven:
    """Re-drive the dead letters that match and had died when the redrive began, each at most once.

    A re-driven letter that dies again at once gets a later key: without the snapshot bound (its
    millisecond, carried in the cursor) the walk would find it again and loop for as long as the
    broker refuses. Stops after ``deadline_s`` with a cursor to continue from. Raises ValueError for a
    bad cursor; a cursor's millisecond later than the store's clock is taken as now.
    """
    deadline = clock() + deadline_s
    last_key: bytes | None = None
    if cursor is None:
        stop_ms, after = store.now_ms(), None
    else:
        stop_ms, last_key = _parse_redrive_cursor(cursor)
        # A cursor names the start millisecond, which cannot be later than now: a later one (forged,
        # or from before this clock was set back) would lift the bound and loop as above.
        stop_ms = min(stop_ms, store.now_ms())
        after = encode_cursor(last_key)
    before = stop_ms + 1  # dead at or before the start millisecond
    if where.due_before_ms is not None:
        before = min(before, where.due_before_ms)
    bounded = replace(where, due_before_ms=before)
    moved = skipped = 0
    while True:
        found = dead_page(store, bounded, cursor=after, limit=PURGE_CHUNK)
        for letter in found.items:
            if clock() >= deadline and last_key is not None:  # each call moves on by one at least
                return Redriven(moved, skipped, _redrive_cursor(stop_ms, last_key))
            last_key = letter.key
            if _redriven_here(letter.key, stop_ms):
                continue
            try:
                await store.redrive(letter.key)
                moved += 1
            except (KeyError, CorruptRecordError):
                skipped += 1
        if found.cursor is None:
            return Redriven(moved, skipped, None)
        after = found.cursor
        # A page's cursor is the last key it read, matched or not: a filter that matches little of a
        # large store still answers within the deadline, and the next call goes on from there.
        last_key = decode_cursor(after)
        if clock() >= deadline:
            return Redriven(moved, skipped, _redrive_cursor(stop_ms, last_key))
        await asyncio.sleep(0)  # a page without a match awaited nothing: let the loop run between pages


async def purge(
    store: RetryStore, state: str, where: Filter, *, in_flight: Callable[[bytes], bool]
) -> tuple[int, int]:
    """Delete the pending messages (``state`` "pending") or dead letters ("dead") that match; returns
    (deleted, skipped because a replay has them in flight).

    Pending: the waiting messages are walked first, then the listing from its start (pending ones, then
    any waiting one spooled since). A head purged lets the next of its lane go, due now, where no later
    page looks (before the pending walk's cursor, no longer waiting): the ones that match are gone by
    then (each judged as listed, its head's due time), and the one it lets go is one the purge did not
    match."""
    deleted = skipped = 0
    waiting_first = state == "pending"
    cursor = encode_cursor(WAITING_MARK) if waiting_first else None
    while True:
        if state == "pending":
            found = pending_page(store, where, cursor=cursor, limit=PURGE_CHUNK)
            keys = [item.key for item in found.items if not item.waiting]
            waiting = [item.key for item in found.items if item.waiting]
            # store.purge claims the keys it deletes and leaves claimed ones alone, in the same step as
            # this check (no await between): what is in flight now is what it skips.
            skipped += sum(1 for k in keys if in_flight(k))
            deleted += await store.purge(pending=keys, waiting=waiting)
            cursor = found.cursor
        else:
            letters = dead_page(store, where, cursor=cursor, limit=PURGE_CHUNK)
            deleted += await store.purge(dead=[letter.key for letter in letters.items])
            cursor = letters.cursor
        if cursor is None and waiting_first:
            waiting_first = False  # then the listing from its start
        elif cursor is None:
            return deleted, skipped
        # store.purge awaits nothing for a page without a match: without this a purge that matches little
        # of a large store read all of it in one step of the event loop (the replay, the APIs and the
        # heartbeats stood still). Between pages, not between the in-flight check and store.purge.
        await asyncio.sleep(0)
