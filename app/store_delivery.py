"""What the background loops deliver through: the retry store's ``deliver``/``deliver_batch`` and the
delay scheduler's ``publish``. Stored messages go out under their original id; a delayed message whose
publish fails falls into the retry store."""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

from rocksidecar.delay import DelayedMessage, DelayScheduler, DelayStore, SentTo
from rocksidecar.retry import ReplayLoop, RetryStore
from rocksidecar.retry.policy import RetryPolicy
from rocksidecar.retry.record import RetryRecord
from rocksidecar.rmq import Message, RocketMQError, Sender, SendResult

from .delivery_policy import RetrySpool, first_due_ms, last_error, message_fault

log = logging.getLogger(__name__)


class DeliveryFailed(Exception):
    """A redelivery from the retry store failed; ``retriable`` False dead-letters it at once."""

    def __init__(self, message: str, *, retriable: bool) -> None:
        super().__init__(message)
        self.retriable = retriable


def _sent_to(r: SendResult) -> SentTo:
    return SentTo(r.queue.broker_name, r.queue.queue_id, r.queue_offset, r.offset_msg_id)


def stored_message(s: RetryRecord | DelayedMessage) -> Message:
    """The message a stored record (retry or delay) is sent as, under its original id."""
    return Message(s.topic, s.body, tags=s.tags, keys=tuple(s.keys), properties=dict(s.properties), id=s.id)


@dataclass(eq=False, slots=True)
class StoreDelivery:
    """Sends what the retry and delay stores hand back, and settles each record by the outcome."""

    producer: Sender
    retry: RetrySpool
    delay: DelayStore
    policy_for: Callable[[str], RetryPolicy] = field(kw_only=True)
    now_ms: Callable[[], int] = field(kw_only=True)

    async def redeliver(self, record: RetryRecord) -> None:
        """The retry store's ``deliver``: send a spooled message again, under its original id."""
        try:
            result = await self.producer.send(
                stored_message(record), sharding_key=record.sharding_key, validated=True
            )
        except RocketMQError as exc:
            raise DeliveryFailed(str(exc), retriable=not message_fault(exc)) from exc
        await self._note_sent([(record.id, result)])

    async def redeliver_batch(self, records: Sequence[RetryRecord]) -> list[Exception | None]:
        """The retry store's ``deliver_batch``: one SEND_BATCH_MESSAGE per queue instead of one send
        per message; an outcome per record."""
        messages = [stored_message(r) for r in records]
        results = await self.producer.send_batch(messages, [r.sharding_key for r in records], validated=True)
        await self._note_sent(
            [(r.id, res) for r, res in zip(records, results, strict=True) if isinstance(res, SendResult)]
        )
        return [
            None
            if isinstance(res, SendResult)
            else DeliveryFailed(str(res), retriable=not message_fault(res))
            for res in results
        ]

    async def _note_sent(self, sent: list[tuple[str, SendResult]]) -> None:
        """Remember for a while that these spooled messages went out, and where, so their status says
        SENT (and a late cancel 409) instead of "unknown". Best effort: they are delivered either way."""
        if not sent:
            return
        try:
            await self.delay.record_sent(
                [id_ for id_, _ in sent],
                [_sent_to(r) for _, r in sent],
            )
        except Exception as exc:
            log.warning("could not record %d delivered ids: %s", len(sent), exc)

    async def publish_delayed(self, msgs: Sequence[DelayedMessage]) -> list[Exception | SentTo | None]:
        """The delay scheduler's ``publish``: send due messages as batches; spool what fails into the retry
        store (which also dead-letters what the broker refuses). An exception per message means "stored
        nowhere": the scheduler keeps it and tries again; a SentTo, where the broker stored it."""
        results = await self.producer.send_batch(
            [stored_message(m) for m in msgs], [m.sharding_key for m in msgs], validated=True
        )
        out: list[Exception | SentTo | None] = [
            _sent_to(r) if isinstance(r, SendResult) else None for r in results
        ]
        now = self.now_ms()
        by_due: dict[int, list[tuple[int, RetryRecord]]] = {}
        for i, (m, result) in enumerate(zip(msgs, results, strict=True)):
            if isinstance(result, Exception):
                error = last_error(result)
                record = RetryRecord(
                    **m.message_fields(),  # the same stored message, now waiting for a retry
                    first_failure_ms=now,
                    last_error=error,
                    history=((now, error),),
                )
                due = first_due_ms(self.policy_for(m.type), now)
                by_due.setdefault(due, []).append((i, record))
        for due, group in by_due.items():
            try:
                await self.retry.spool_many([r for _, r in group], due)
            except Exception as exc:
                for i, _ in group:
                    out[i] = exc
        return out


def delivery_loops(
    producer: Sender,
    retry: RetryStore,
    delay: DelayStore,
    *,
    policy_for: Callable[[str], RetryPolicy],
    workers: int,
    batch_max: int,
    on_published: Callable[[float], None],
    on_replayed: Callable[[str], None],
) -> tuple[DelayScheduler, ReplayLoop]:
    """The delay scheduler and the retry replay of a process (the sidecar, a ``dmq`` replica), both
    delivering through one StoreDelivery: a delayed message whose publish fails falls into the retry
    store, and the replay sends it again."""
    delivery = StoreDelivery(producer, retry, delay, policy_for=policy_for, now_ms=retry.now_ms)
    scheduler = DelayScheduler(delay, delivery.publish_delayed, on_published=on_published)
    replay = ReplayLoop(
        retry,
        delivery.redeliver,
        policy_for,
        workers=workers,
        deliver_batch=delivery.redeliver_batch,
        batch_max=batch_max,
        on_replayed=on_replayed,
    )
    return scheduler, replay
