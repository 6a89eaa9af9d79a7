"""Rock-DMQ local mode: messages with an arbitrary delivery delay, kept in the local store until due."""

from delay.keys import COLUMN_FAMILIES
from delay.message import DELAY_DUE_AT, DELAY_PUBLISHED_AT, CorruptMessageError, DelayedMessage
from delay.publication import Publish
from delay.scheduler import DelayScheduler
from delay.status import CancelOutcome, DelayState, DelayStats, DelayStatus, SentTo
from delay.store import DelayStore

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
