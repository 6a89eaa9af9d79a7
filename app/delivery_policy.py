"""The failure rule as the sidecar applies it, for sends (app.sidecar) and replays (app.store_delivery).

Which errors are retried within a send, final, or spooled is decided once, in the error table
(rmq.errors); this module only reads it: a final error is answered 422 at send time and dead-lettered at
once during replay, everything else is spooled with its last error (the broker's code and remark) and
retried on the message type's ladder.
"""

from __future__ import annotations

import asyncio
from collections.abc import Hashable, Iterable, Sequence
from typing import Protocol, TypeVar

from rocksidecar.retry.policy import RetryPolicy
from rocksidecar.retry.record import RetryRecord
from rocksidecar.rmq import SendFailed
from rocksidecar.rmq.errors import is_final
from rocksidecar.storage.message import StoredMessage

K = TypeVar("K", bound=Hashable)


class RetrySpool(Protocol):
    """Where a failed message is kept for replay (the retry store)."""

    async def spool(self, record: RetryRecord, due_ms: int | None = None) -> object: ...

    async def spool_many(self, records: Sequence[RetryRecord], due_ms: int | None = None) -> object: ...


class Lanes(Protocol):
    """The retry store's lanes (retry.lanes) as the send paths ask them: whether a sharding key's earlier
    messages wait there, which a message of the key sent now would overtake."""

    @property
    def lanes_open(self) -> int:
        """0 while no lane holds a message: then nothing needs asking."""
        ...

    def lane_head_due(self, topic: str, sharding_key: str) -> int | None:
        """When the lane's first message is due; None when the lane is empty."""
        ...


# The lastError of a message spooled, untried, because its key's lane holds earlier ones.
BEHIND = "waits behind an earlier spooled message of its sharding key"


def busy_lanes(lanes: Lanes, keyed: Iterable[tuple[K, str, str | None]]) -> dict[K, int]:
    """Of ``keyed`` (key, topic, sharding key), the keys whose lane holds earlier messages, each with
    its lane's head's due time (the lane asked once however many messages it has here)."""
    heads: dict[tuple[str, str], int | None] = {}
    busy: dict[K, int] = {}
    for key, topic, sharding_key in keyed:
        if sharding_key is None:
            continue
        lane = (topic, sharding_key)
        if lane not in heads:
            heads[lane] = lanes.lane_head_due(topic, sharding_key)
        if (due := heads[lane]) is not None:
            busy[key] = due
    return busy


def message_fault(exc: BaseException) -> bool:
    """The broker refused the message itself, or validation did: sending it again can never work."""
    return is_final(exc)


def last_error(exc: BaseException) -> str:
    """What went wrong, as kept with a spooled message: the last attempt's error when there were any."""
    return str(exc.last if isinstance(exc, SendFailed) and exc.last else exc)


def first_due_ms(policy: RetryPolicy, now_ms: int) -> int:
    """When a message that just failed is tried again: the first rung of its type's ladder."""
    return now_ms + int(policy.delay_s(0) * 1000)


def failed_send(
    msg: StoredMessage, exc: BaseException, now_ms: int, policy: RetryPolicy
) -> tuple[RetryRecord, int]:
    """The one conversion of a failed send into a stored retry: ``msg`` with its first failure now and
    the send's last error, and when it is first due. Every path that spools a failure calls it (the
    sidecar's sends, the delay store's publishes, the Rock-DMQ forwarder)."""
    return RetryRecord.of(msg, error=last_error(exc), failed_at_ms=now_ms), first_due_ms(policy, now_ms)


def in_lane_order(records: Sequence[tuple[K, RetryRecord, int]]) -> list[tuple[K, RetryRecord, int]]:
    """(key, record, due) with every record of one lane (topic and sharding key) due when its first one
    is: spool_by_due spools each due time in a call of its own, concurrently, and a lane's records must
    reach the store in their order (the store queues them so; those after the first wait behind it, and
    their own due time never counts)."""
    first: dict[tuple[str, str], int] = {}
    out: list[tuple[K, RetryRecord, int]] = []
    for key, record, due in records:
        lane = (record.topic, record.sharding_key) if record.sharding_key else None
        out.append((key, record, due if lane is None else first.setdefault(lane, due)))
    return out


async def spool_by_due(
    retry: RetrySpool, records: Sequence[tuple[K, RetryRecord, int]]
) -> dict[K, Exception]:
    """Spool (key, record, due) in one synced batch per due time, all or none per batch, the records of
    one sharding key in one of them (in_lane_order); the error of each key whose batch failed (nothing
    stored for those: never answer them 2xx)."""
    return await spool_in_lane_order(retry, in_lane_order(records))


async def spool_in_lane_order(
    retry: RetrySpool, records: Sequence[tuple[K, RetryRecord, int]]
) -> dict[K, Exception]:
    """spool_by_due of ``records`` already in_lane_order (the caller answers with the due times it
    spooled)."""
    if not records:
        return {}
    by_due: dict[int, list[tuple[K, RetryRecord]]] = {}
    for key, record, due in records:
        by_due.setdefault(due, []).append((key, record))
    failed: dict[K, Exception] = {}

    async def spool(due: int, group: list[tuple[K, RetryRecord]]) -> None:
        try:
            await retry.spool_many([r for _, r in group], due)
        except Exception as exc:
            failed.update((key, exc) for key, _ in group)

    if len(by_due) == 1:  # the usual case: no task of its own
        await spool(*next(iter(by_due.items())))
    else:
        await asyncio.gather(*(spool(due, group) for due, group in by_due.items()))
    return failed
