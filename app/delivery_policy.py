"""The failure rule as the sidecar applies it, for sends (app.sidecar) and replays (app.store_delivery).

Which errors are retried within a send, final, or spooled is decided once, in the error table
(rmq.errors); this module only reads it: a final error is answered 422 at send time and dead-lettered at
once during replay, everything else is spooled with its last error (the broker's code and remark) and
retried on the message type's ladder.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol

from rocksidecar.retry.policy import RetryPolicy
from rocksidecar.retry.record import RetryRecord
from rocksidecar.rmq import RocketMQError, SendFailed
from rocksidecar.rmq.errors import is_final


class RetrySpool(Protocol):
    """Where a failed message is kept for replay (the retry store)."""

    async def spool(self, record: RetryRecord, due_ms: int | None = None) -> object: ...

    async def spool_many(self, records: Sequence[RetryRecord], due_ms: int | None = None) -> object: ...


def message_fault(exc: BaseException) -> bool:
    """The broker refused the message itself, or validation did: sending it again can never work."""
    return is_final(exc)


def last_error(exc: RocketMQError) -> str:
    """What went wrong, as kept with a spooled message: the last attempt's error when there were any."""
    return str(exc.last if isinstance(exc, SendFailed) and exc.last else exc)


def first_due_ms(policy: RetryPolicy, now_ms: int) -> int:
    """When a message that just failed is tried again: the first rung of its type's ladder."""
    return now_ms + int(policy.delay_s(0) * 1000)
