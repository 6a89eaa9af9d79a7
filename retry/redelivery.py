"""Redelivery: one attempt at a handful of due messages and the store change that follows each outcome.

Delivered messages are acknowledged together in one batch; a failed one moves to its next rung, or to
the dead letters when it is not redeliverable or its type's retries are exhausted (R2, R4); a value that
does not decode is quarantined (R7). Store errors propagate to the caller (the replay loop), with the
outcomes stored before them (PartlyStored), counting a write whose WAL sync alone failed (UnsyncedError)
as stored: the store holds it and nothing writes it again.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass

from rocksidecar.storage.errors import StorageError, UnsyncedError

from .policy import RetryPolicy
from .record import CorruptRecordError, RetryRecord, decode_record
from .store import RetryStore

Deliver = Callable[[RetryRecord], Awaitable[None]]
# One outcome per record, in order: an Exception means that record failed, anything else (None, a
# SendResult) that it was delivered. Producer.send_batch's outcome list fits as it is.
DeliverBatch = Callable[[Sequence[RetryRecord]], Awaitable[Sequence[object]]]
PolicyFor = Callable[[str], RetryPolicy]

ERROR_TEXT_LIMIT = 500
DELIVERED, RESCHEDULED, DEAD, QUARANTINED = "delivered", "rescheduled", "dead", "quarantined"


def describe(exc: BaseException) -> str:
    text = f"{type(exc).__name__}: {exc}" if str(exc) else type(exc).__name__
    return text[:ERROR_TEXT_LIMIT]


class PartlyStored(StorageError):
    """A store write failed part-way through a batch. ``outcomes`` are those stored before it, and that
    of the failed write itself when the store holds it (only its sync failed): a neighbour's failed
    reschedule must not report messages delivered and acknowledged already as not delivered (they are
    gone from the store and are not sent again), nor an ack in the store but not on disk."""

    def __init__(self, message: str, outcomes: list[str]) -> None:
        super().__init__(message)
        self.outcomes = outcomes


@dataclass(eq=False, slots=True)
class Redelivery:
    """Applies ``deliver`` (one record at a time) or ``deliver_batch`` (all at once) to due records."""

    store: RetryStore
    deliver: Deliver
    policy_for: PolicyFor
    deliver_batch: DeliverBatch | None = None

    async def run(self, items: Sequence[tuple[bytes, bytes]]) -> list[str]:
        """Outcomes of the (key, stored value) pairs, one per pair (not in their order).

        Raises:
            PartlyStored: a store write failed; its ``outcomes`` are those stored before it (the
                messages delivered and acknowledged, moved or buried), and the failed write's own when
                only its sync failed (UnsyncedError); the others are still pending.
        """
        outcomes: list[str] = []
        try:
            await self._run(items, outcomes)
        except StorageError as exc:
            raise PartlyStored(str(exc), outcomes) from exc
        return outcomes

    async def _run(self, items: Sequence[tuple[bytes, bytes]], outcomes: list[str]) -> None:
        keys: list[bytes] = []
        records: list[RetryRecord] = []
        for key, raw in items:
            try:
                records.append(decode_record(raw))
                keys.append(key)
            except CorruptRecordError as exc:
                await _stored(self.store.quarantine(key, raw, f"corrupt value: {exc}"), outcomes, QUARANTINED)
        if not records:
            return
        results = await self._attempt(records)
        ok = [not isinstance(result, Exception) for result in results]
        delivered = [key for key, stored in zip(keys, ok, strict=True) if stored]
        if delivered:
            acked = [r for r, stored in zip(records, ok, strict=True) if stored]
            await _stored(self.store.ack_many(delivered, acked), outcomes, DELIVERED, len(delivered))
        for key, record, result in zip(keys, records, results, strict=True):
            if isinstance(result, Exception):
                await self._failed(key, record, result, outcomes)

    async def _attempt(self, records: list[RetryRecord]) -> list[object]:
        if self.deliver_batch is None:
            results: list[object] = []
            for record in records:
                try:
                    await self.deliver(record)
                    results.append(None)
                except Exception as exc:
                    results.append(exc)
            return results
        try:
            results = list(await self.deliver_batch(records))
        except Exception as exc:
            return [exc] * len(records)
        if len(results) != len(records):
            error = RuntimeError(f"deliver_batch returned {len(results)} outcomes for {len(records)} records")
            return [error] * len(records)
        return results

    async def _failed(self, key: bytes, record: RetryRecord, exc: Exception, outcomes: list[str]) -> None:
        policy = self.policy_for(record.type)
        now = self.store.now_ms()
        error = describe(exc)
        failed = record.failed(now, error)
        if not getattr(exc, "redeliverable", True):
            reason = f"not redeliverable: {error}"
        elif policy.exhausted(failed.retry_count):
            reason = f"retries exhausted after {failed.retry_count}: {error}"
        else:
            due = now + round(policy.delay_s(failed.retry_count) * 1000)
            await _stored(self.store.reschedule(key, failed, due, was=record), outcomes, RESCHEDULED)
            return
        await _stored(self.store.bury(key, failed, reason, was=record), outcomes, DEAD)


async def _stored(write: Awaitable[object], outcomes: list[str], outcome: str, n: int = 1) -> None:
    """Await one store write standing for ``n`` times ``outcome``, and record them in ``outcomes`` once
    the store holds it: written, or applied with only its WAL sync failed (UnsyncedError, re-raised so
    the loop pauses). That write is never made again (an ack's message is gone, a burial's hook fired),
    so reported as a store error it would never be reported as what it was."""
    try:
        await write
    except UnsyncedError:
        outcomes += [outcome] * n
        raise
    outcomes += [outcome] * n
