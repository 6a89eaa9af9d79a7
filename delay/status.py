"""Values the delay store reports: where one message stands, what a cancel did, and the store as a whole."""

from __future__ import annotations

import enum
from dataclasses import dataclass

from rocksidecar.storage.status import Status, StoredAt

# The one vocabulary; this store reports SCHEDULED, SENT (published: stored by a broker, or handed to
# the retry store) and CANCELLED.
DelayState = Status


class CancelOutcome(enum.Enum):
    CANCELLED = "cancelled"  # it will not be published
    NOT_FOUND = "not_found"  # never scheduled, or its done marker has passed the retention
    ALREADY_SENT = "already_sent"  # too late: it was published


@dataclass(frozen=True, slots=True)
class DelayStatus:
    id: str
    state: Status  # SCHEDULED, SENT or CANCELLED
    due_ms: int | None = None  # when it is (or was) due; SENT and CANCELLED: when their marker kept it
    at_ms: int | None = None  # SENT: when it was published; CANCELLED: when it was cancelled
    topic: str | None = None  # likewise: SENT and CANCELLED when their marker kept it
    sent_to: StoredAt | None = None  # SENT, when the path that sent it recorded where


@dataclass(frozen=True, slots=True)
class DelayStats:
    pending: int  # scheduled messages not yet published or cancelled
    next_due_ms: int | None  # due time of the earliest of them
    healthy: bool
    last_error: str | None
