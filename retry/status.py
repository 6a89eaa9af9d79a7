"""Values the retry store reports: where one message stands, and the store as a whole."""

from __future__ import annotations

from dataclasses import dataclass

from rocksidecar.storage.status import Status

State = Status  # the one vocabulary; this store reports SPOOLED (waiting) and DEAD (see reason)


@dataclass(frozen=True, slots=True)
class MessageStatus:
    id: str
    state: Status  # SPOOLED or DEAD
    key: bytes
    attempts: int  # failed deliveries so far, the send before spooling included (failed_attempts)
    last_error: str
    topic: str | None = None  # None when the stored value does not decode
    next_attempt_at_ms: int | None = None  # SPOOLED only
    reason: str | None = None  # DEAD only
    dead_at_ms: int | None = None  # DEAD only


@dataclass(frozen=True, slots=True)
class StoreStats:
    pending: int
    dead: int
    oldest_due_ms: int | None  # due time of the earliest pending message
    # first failure of the oldest pending message, in time (not in due order); its creation for one
    # spooled without a failure (retry.oldest); None when nothing pending is known
    oldest_first_failure_ms: int | None
    healthy: bool
    last_error: str | None
