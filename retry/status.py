"""Values the retry store reports: where one message stands, and the store as a whole."""

from __future__ import annotations

import enum
from dataclasses import dataclass


class State(enum.Enum):
    SPOOLED = "SPOOLED"  # waiting in the store for its next attempt
    DEAD = "DEAD"  # left the ladder; see reason


@dataclass(frozen=True, slots=True)
class MessageStatus:
    id: str
    state: State
    key: bytes
    attempts: int  # failed replay attempts so far (the record's retry_count)
    last_error: str
    next_attempt_at_ms: int | None = None  # SPOOLED only
    reason: str | None = None  # DEAD only
    dead_at_ms: int | None = None  # DEAD only


@dataclass(frozen=True, slots=True)
class StoreStats:
    pending: int
    dead: int
    oldest_due_ms: int | None  # due time of the earliest pending message
    oldest_first_failure_ms: int | None  # first failure of that message
    healthy: bool
    last_error: str | None
