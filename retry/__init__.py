"""The local retry store: messages that could not be delivered yet, replayed on a back-off ladder."""

from retry.dead_letter import DeadLetter
from retry.notify import DeadLetterNotifier
from retry.policy import RetryPolicy
from retry.record import CorruptRecordError, RetryRecord
from retry.replay import ReplayLoop
from retry.status import MessageStatus, State, StoreStats
from retry.store import RetryStore

__all__ = [
    "CorruptRecordError",
    "DeadLetter",
    "DeadLetterNotifier",
    "MessageStatus",
    "ReplayLoop",
    "RetryPolicy",
    "RetryRecord",
    "RetryStore",
    "State",
    "StoreStats",
]
