"""What the admin API and the CLI ask of the delay store: scheduled messages by due time, filtered
and paged."""

from __future__ import annotations

from dataclasses import dataclass

from rocksidecar.storage.query import Filter, Page, due_messages, page

from .keys import DUE_CF, split_due_key
from .message import DelayedMessage, decode_message
from .store import DelayStore


@dataclass(frozen=True, slots=True)
class ScheduledItem:
    key: bytes
    id: str
    due_ms: int
    message: DelayedMessage | None  # None: the value does not decode
    corrupt: str | None = None


def scheduled_page(
    store: DelayStore, where: Filter, *, cursor: str | None = None, limit: int = 100
) -> Page[ScheduledItem]:
    """Scheduled messages in due-time order."""
    listed = due_messages(where, split_due_key, decode_message, ScheduledItem)
    return page(store.kv, DUE_CF, where, listed, cursor=cursor, limit=limit)
