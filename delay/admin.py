"""What the admin API and the CLI ask of the delay store: scheduled messages by due time, filtered
and paged."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from rocksidecar.storage.query import Filter, Page, page

from .keys import DUE_CF, split_due_key
from .message import CorruptMessageError, DelayedMessage, decode_message
from .store import DelayStore


@dataclass(frozen=True, slots=True)
class ScheduledItem:
    key: bytes
    id: str
    due_ms: int
    message: DelayedMessage | None  # None: the value does not decode
    corrupt: str | None = None


def _scheduled(where: Filter) -> Callable[[bytes, bytes], ScheduledItem | None]:
    def decode(key: bytes, raw: bytes) -> ScheduledItem | None:
        try:
            due_ms, id_ = split_due_key(key)
        except ValueError:
            return None
        try:
            msg = decode_message(raw)
        except CorruptMessageError as exc:
            unfiltered = where.topic is None and where.type is None
            return ScheduledItem(key, id_, due_ms, None, str(exc)) if unfiltered else None
        return ScheduledItem(key, id_, due_ms, msg) if where.matches(msg.topic, msg.type) else None

    return decode


def scheduled_page(
    store: DelayStore, where: Filter, *, cursor: str | None = None, limit: int = 100
) -> Page[ScheduledItem]:
    """Scheduled messages in due-time order."""
    return page(store.kv, DUE_CF, where, _scheduled(where), cursor=cursor, limit=limit)
