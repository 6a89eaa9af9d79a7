"""Values the delay store reports: where one message stands, what a cancel did, and the store as a whole."""

from __future__ import annotations

import enum
from dataclasses import dataclass


class DelayState(enum.Enum):
    SCHEDULED = "SCHEDULED"  # waiting in the store for its due time (or being published right now)
    SENT = "SENT"  # published: stored by a broker, or handed to the retry store
    CANCELLED = "CANCELLED"


class CancelOutcome(enum.Enum):
    CANCELLED = "cancelled"  # it will not be published
    NOT_FOUND = "not_found"  # never scheduled, or its done marker has passed the retention
    ALREADY_SENT = "already_sent"  # too late: it was published


@dataclass(frozen=True, slots=True)
class SentTo:
    """Where a broker stored a message: what the send answered."""

    broker: str
    queue_id: int
    queue_offset: int
    offset_msg_id: str  # the broker's id of the stored copy (the message id is the UNIQ_KEY)


@dataclass(frozen=True, slots=True)
class DelayStatus:
    id: str
    state: DelayState
    due_ms: int | None = None  # SCHEDULED: when it is due
    at_ms: int | None = None  # SENT: when it was published; CANCELLED: when it was cancelled
    topic: str | None = None  # SCHEDULED only
    sent_to: SentTo | None = None  # SENT, when the path that sent it recorded where


@dataclass(frozen=True, slots=True)
class DelayStats:
    pending: int  # scheduled messages not yet published or cancelled
    next_due_ms: int | None  # due time of the earliest of them
    healthy: bool
    last_error: str | None
