"""What the admin API and the CLI ask of a running retry store: filtered, paged listings of pending
messages and dead letters, re-drive by filter, and purge."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from rocksidecar.storage.query import Filter, Page, page

from .dead_letter import DeadLetter, decode_dead
from .keys import DEAD_CF, PENDING_CF, parse_pending_key
from .record import CorruptRecordError, RetryRecord, decode_record
from .store import RetryStore


@dataclass(frozen=True, slots=True)
class PendingItem:
    """A pending retry as the admin views list it."""

    key: bytes
    id: str
    due_ms: int
    record: RetryRecord | None  # None: the value does not decode (the replay quarantines it)
    corrupt: str | None = None


PURGE_CHUNK = 1000


def _pending(where: Filter) -> Callable[[bytes, bytes], PendingItem | None]:
    def decode(key: bytes, raw: bytes) -> PendingItem | None:
        try:
            parsed = parse_pending_key(key)
        except ValueError:
            return None
        try:
            record: RetryRecord | None = decode_record(raw)
        except CorruptRecordError as exc:
            if where.topic is None and where.type is None:
                return PendingItem(key, parsed.id, parsed.due_ms, None, str(exc))
            return None
        assert record is not None
        if not where.matches(record.topic, record.type):
            return None
        return PendingItem(key, record.id, parsed.due_ms, record)

    return decode


def _dead(where: Filter) -> Callable[[bytes, bytes], DeadLetter | None]:
    def decode(key: bytes, raw: bytes) -> DeadLetter | None:
        letter = decode_dead(key, raw)
        record = letter.record
        if (where.topic is not None or where.type is not None) and record is None:
            return None
        if record is not None and not where.matches(record.topic, record.type):
            return None
        return letter

    return decode


def pending_page(
    store: RetryStore, where: Filter, *, cursor: str | None = None, limit: int = 100
) -> Page[PendingItem]:
    """Pending messages in due-time order (``due_*`` filter the next attempt time)."""
    return page(store.kv, PENDING_CF, where, _pending(where), cursor=cursor, limit=limit)


def dead_page(
    store: RetryStore, where: Filter, *, cursor: str | None = None, limit: int = 100
) -> Page[DeadLetter]:
    """Dead letters in the order they died (``due_*`` filter the time they died)."""
    return page(store.kv, DEAD_CF, where, _dead(where), cursor=cursor, limit=limit)


async def redrive(store: RetryStore, where: Filter) -> tuple[int, int]:
    """Re-drive every dead letter that matches; returns (moved, skipped as corrupt or gone)."""
    moved = skipped = 0
    cursor: str | None = None
    while True:
        found = dead_page(store, where, cursor=cursor, limit=PURGE_CHUNK)
        for letter in found.items:
            try:
                await store.redrive(letter.key)
                moved += 1
            except (KeyError, CorruptRecordError):
                skipped += 1
        if found.cursor is None:
            return moved, skipped
        cursor = found.cursor


async def purge(
    store: RetryStore, state: str, where: Filter, *, in_flight: Callable[[bytes], bool]
) -> tuple[int, int]:
    """Delete the pending messages (``state`` "pending") or dead letters ("dead") that match; returns
    (deleted, skipped because a replay has them in flight)."""
    deleted = skipped = 0
    cursor: str | None = None
    while True:
        if state == "pending":
            found = pending_page(store, where, cursor=cursor, limit=PURGE_CHUNK)
            keys = [item.key for item in found.items]
            busy = [k for k in keys if in_flight(k)]
            deleted += await store.purge(pending=[k for k in keys if not in_flight(k)])
            skipped += len(busy)
            cursor = found.cursor
        else:
            letters = dead_page(store, where, cursor=cursor, limit=PURGE_CHUNK)
            deleted += await store.purge(dead=[letter.key for letter in letters.items])
            cursor = letters.cursor
        if cursor is None:
            return deleted, skipped
