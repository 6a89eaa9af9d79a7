"""Rock-DMQ local mode: messages with an arbitrary delivery delay, kept in the local store until due."""

from rocksidecar.storage.status import StoredAt

from .keys import COLUMN_FAMILIES
from .message import DELAY_DUE_AT, DELAY_PUBLISHED_AT, CorruptMessageError, DelayedMessage
from .publication import SPOOLED, Publish, Spooled
from .scheduler import DelayScheduler
from .status import CancelOutcome, DelayState, DelayStats, DelayStatus
from .store import DelayStore

__all__ = [
    "COLUMN_FAMILIES",
    "DELAY_DUE_AT",
    "DELAY_PUBLISHED_AT",
    "SPOOLED",
    "CancelOutcome",
    "CorruptMessageError",
    "DelayScheduler",
    "DelayState",
    "DelayStats",
    "DelayStatus",
    "DelayStore",
    "DelayedMessage",
    "Publish",
    "Spooled",
    "StoredAt",
]
