"""The local retry store: messages that could not be delivered yet, replayed on a back-off ladder."""

from .dead_letter import DeadLetter
from .policy import RetryPolicy
from .record import CorruptRecordError, RetryRecord
from .replay import ReplayLoop
from .status import MessageStatus, State, StoreStats
from .store import RetryStore

__all__ = [
    "CorruptRecordError",
    "DeadLetter",
    "MessageStatus",
    "ReplayLoop",
    "RetryPolicy",
    "RetryRecord",
    "RetryStore",
    "State",
    "StoreStats",
]
