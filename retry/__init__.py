"""The local retry store: messages that could not be delivered yet, replayed on a back-off ladder."""

from rocksidecar.retry.dead_letter import DeadLetter
from rocksidecar.retry.notify import DeadLetterNotifier
from rocksidecar.retry.policy import RetryPolicy
from rocksidecar.retry.record import CorruptRecordError, RetryRecord
from rocksidecar.retry.replay import ReplayLoop
from rocksidecar.retry.status import MessageStatus, State, StoreStats
from rocksidecar.retry.store import RetryStore

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
