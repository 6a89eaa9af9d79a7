"""Rock-DMQ local mode: messages with an arbitrary delivery delay, kept in the local store until due."""

from rocksidecar.delay.keys import COLUMN_FAMILIES
from rocksidecar.delay.message import DELAY_DUE_AT, DELAY_PUBLISHED_AT, CorruptMessageError, DelayedMessage
from rocksidecar.delay.publication import Publish
from rocksidecar.delay.scheduler import DelayScheduler
from rocksidecar.delay.status import CancelOutcome, DelayState, DelayStats, DelayStatus, SentTo
from rocksidecar.delay.store import DelayStore

__all__ = [
    "COLUMN_FAMILIES",
    "DELAY_DUE_AT",
    "DELAY_PUBLISHED_AT",
    "CancelOutcome",
    "CorruptMessageError",
    "DelayScheduler",
    "DelayState",
    "DelayStats",
    "DelayStatus",
    "DelayStore",
    "DelayedMessage",
    "Publish",
    "SentTo",
]
