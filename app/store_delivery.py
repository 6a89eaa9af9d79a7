"""What the background loops deliver through: the retry store's ``deliver``/``deliver_batch`` and the
delay scheduler's ``publish``. Stored messages go out under their original id; a delayed message whose
publish fails falls into the retry store."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace

from rocksidecar.delay import SPOOLED, DelayedMessage, DelayScheduler, DelayStore, Spooled, StoredAt
from rocksidecar.retry import ReplayLoop, RetryStore
from rocksidecar.retry.policy import RetryPolicy
from rocksidecar.retry.record import RetryRecord
from rocksidecar.rmq import RocketMQError, Sender, SendResult
from rocksidecar.storage.due_loop import observe
from rocksidecar.storage.message import StoredMessage

from .delivery_policy import BEHIND, Lanes, RetrySpool, busy_lanes, failed_send, message_fault, spool_by_due
from .wire import stored_at, to_wire

log = logging.getLogger(__name__)


class _Settle:
    """What a publish_delayed call's group of messages tells the calls after it: ``done`` set once they
    are stored or spooled; ``lanes``, theirs."""

    __slots__ = ("done", "lanes")

    def __init__(self) -> None:
        self.done = asyncio.Event()
        self.lanes: list[tuple[str, str]] = []


class DeliveryFailed(Exception):
    """A redelivery from the retry store failed; ``redeliverable`` False dead-letters it at once."""

    def __init__(self, message: str, *, redeliverable: bool) -> None:
        super().__init__(message)
        self.redeliverable = redeliverable


@dataclass(eq=False, slots=True)
class StoreDelivery:
    """Sends what the retry and delay stores hand back, and settles each record by the outcome."""

    producer: Sender
    retry: RetrySpool
    delay: DelayStore
    policy_for: Callable[[str], RetryPolicy] = field(kw_only=True)
    now_ms: Callable[[], int] = field(kw_only=True)
    # (lateness_s, message) for a delayed message the replay published in the end (the scheduler's own
    # publishes report through DelayScheduler's on_published)
    on_published: Callable[[float, StoredMessage], None] | None = field(default=None, kw_only=True)
    # The delayed messages (spooled by publish_delayed: a delay_due_ms) a broker stored in the end, in
    # one list per redelivery; Rock-DMQ replicas mark them then (app.dmq.replication), as the scheduler's
    # on_sent marks those a broker stored at once: only now may the other copies be dropped.
    on_delayed_sent: Callable[[list[RetryRecord]], None] | None = field(default=None, kw_only=True)
    # The retry store's lanes: a due message of a sharding key whose earlier messages wait there is not
    # published (it would be stored before them) but spooled behind them (None: never asked).
    lanes: Lanes | None = field(default=None, kw_only=True)
    # The lanes (topic, sharding key) a publish_delayed call is publishing messages of, each with what
    # the call sets once they are stored or spooled (the lane's last call only; none once it has).
    _publishing: dict[tuple[str, str], asyncio.Event] = field(default_factory=dict, init=False, repr=False)

    async def redeliver(self, record: RetryRecord) -> None:
        """The retry store's ``deliver``: send a spooled message again, under its original id."""
        try:
            result = await self.producer.send(
                to_wire(record), sharding_key=record.sharding_key, validated=True
            )
        except RocketMQError as exc:
            raise DeliveryFailed(str(exc), redeliverable=not message_fault(exc)) from exc
        if record.delay_due_ms:
            self._late([record])
            self._delayed_sent([record])
        await self._note_sent([(record.id, result)])

    async def redeliver_batch(self, records: Sequence[RetryRecord]) -> list[Exception | None]:
        """The retry store's ``deliver_batch``: one SEND_BATCH_MESSAGE per queue instead of one send
        per message; an outcome per record."""
        messages = [to_wire(r) for r in records]
        results = await self.producer.send_batch(messages, [r.sharding_key for r in records], validated=True)
        delayed = [
            r
            for r, res in zip(records, results, strict=True)
            if r.delay_due_ms and isinstance(res, SendResult)
        ]
        if delayed:
            self._late(delayed)
            self._delayed_sent(delayed)
        await self._note_sent(
            [(r.id, res) for r, res in zip(records, results, strict=True) if isinstance(res, SendResult)]
        )
        return [
            None
            if isinstance(res, SendResult)
            else DeliveryFailed(str(res), redeliverable=not message_fault(res))
            for res in results
        ]

    def _late(self, records: Sequence[RetryRecord]) -> None:
        """Tell how late these delayed messages, spooled when their publish failed, went out in the end:
        to now by the delay store's clock, as the scheduler measures those it publishes itself."""
        now = self.delay.now_ms()
        for record in records:
            observe(self.on_published, (now - record.delay_due_ms) / 1000, "on_published", record)

    def _delayed_sent(self, records: list[RetryRecord]) -> None:
        observe(self.on_delayed_sent, records, "on_delayed_sent")

    async def _note_sent(self, sent: list[tuple[str, SendResult]]) -> None:
        """Remember for a while that these spooled messages went out, and where, so their status says
        SENT (and a late cancel 409) instead of "unknown". Best effort: they are delivered either way."""
        if not sent:
            return
        try:
            await self.delay.record_sent(
                [id_ for id_, _ in sent],
                [stored_at(r) for _, r in sent],
            )
        except Exception as exc:
            log.warning("could not record %d delivered ids: %s", len(sent), exc)

    async def publish_delayed(self, msgs: Sequence[DelayedMessage]) -> list[Exception | StoredAt | Spooled]:
        """The delay scheduler's ``publish``: send due messages as batches; spool what fails into the retry
        store (which also dead-letters what the broker refuses). An exception per message means "stored
        nowhere": the scheduler keeps it and tries again; a StoredAt, where the broker stored it; SPOOLED,
        kept in the retry store (not published yet: its replay publishes it, and tells its lateness); so is
        one whose sharding key's earlier messages wait there (spooled behind them, untried).

        The scheduler runs several calls at once, and a key's message still on its way in one is in no
        lane yet: a later message of the key published meanwhile by another call would be stored before it
        should the first one's publish fail and be spooled. So a message whose lane (topic and key) an
        earlier call is publishing waits for that call's messages of it to settle (stored or spooled),
        then goes or is held behind them; the call's other messages do not wait."""
        if self.lanes is None:
            return await self._publish_due(msgs)
        publishing = self._publishing
        groups: dict[asyncio.Event | None, list[int]] = {}  # by the earlier publish they wait for
        settles: dict[asyncio.Event | None, _Settle] = {}  # each group's, told to the calls after it
        seen: dict[tuple[str, str], asyncio.Event | None] = {}
        for i, m in enumerate(msgs):
            key = m.sharding_key
            if not key:  # no lane (retry.lanes.lane_of)
                groups.setdefault(None, []).append(i)
                continue
            lane = (m.topic, key)
            if lane in seen:  # the lane's earlier message in this call: the same group, in its order
                before = seen[lane]
            else:
                before = seen[lane] = publishing.get(lane)
                settle = settles.get(before)
                if settle is None:
                    settle = settles[before] = _Settle()
                settle.lanes.append(lane)
                publishing[lane] = settle.done
            groups.setdefault(before, []).append(i)
        if len(groups) == 1:  # the usual call: nothing to wait for, no task of its own
            before = next(iter(groups))
            return await self._publish_after(before, settles.get(before), msgs)
        parts = await asyncio.gather(
            *(
                self._publish_after(before, settles.get(before), [msgs[i] for i in idx])
                for before, idx in groups.items()
            ),
            return_exceptions=True,
        )
        out: list[Exception | StoredAt | Spooled] = [SPOOLED] * len(msgs)
        for idx, part in zip(groups.values(), parts, strict=True):
            if isinstance(part, BaseException) and not isinstance(part, Exception):
                raise part
            for n, i in enumerate(idx):  # a group that raised: stored nowhere, the others as they went
                out[i] = part if isinstance(part, Exception) else part[n]
        return out

    async def _publish_after(
        self, before: asyncio.Event | None, settle: _Settle | None, msgs: Sequence[DelayedMessage]
    ) -> list[Exception | StoredAt | Spooled]:
        """_publish_due of ``msgs`` once the earlier publish of their lanes (``before``) has settled;
        ``settle`` tells the calls after this one that these have (even when cancelled or failed)."""
        try:
            if before is not None:
                await before.wait()
            return await self._publish_due(msgs)
        finally:
            if settle is not None:
                settle.done.set()
                for lane in settle.lanes:  # a later call's own, if one came meanwhile
                    if self._publishing.get(lane) is settle.done:
                        del self._publishing[lane]

    async def _publish_due(self, msgs: Sequence[DelayedMessage]) -> list[Exception | StoredAt | Spooled]:
        """publish_delayed of ``msgs``, none of whose lanes an earlier call is still publishing."""
        lanes = self.lanes
        if lanes is not None and lanes.lanes_open:
            behind = busy_lanes(lanes, ((i, m.topic, m.sharding_key) for i, m in enumerate(msgs)))
            if behind:
                return await self._publish_behind(msgs, behind)
        return await self._publish(msgs)

    async def _publish_behind(
        self, msgs: Sequence[DelayedMessage], behind: dict[int, int]
    ) -> list[Exception | StoredAt | Spooled]:
        """publish_delayed of due messages some of which (``behind``: their indexes) are spooled behind
        their lane instead; the others are published."""
        now = self.now_ms()  # due now should the lane empty meanwhile (sidecar.Sidecar._spool_behind)
        queued = [
            (i, replace(RetryRecord.of(msgs[i], error=BEHIND), delay_due_ms=msgs[i].due_ms), now)
            for i in behind
        ]
        out: list[Exception | StoredAt | Spooled] = [SPOOLED] * len(msgs)
        for i, exc in (await spool_by_due(self.retry, queued)).items():
            out[i] = exc  # stored nowhere: the scheduler keeps it
        rest = [i for i in range(len(msgs)) if i not in behind]
        if rest:
            for i, result in zip(rest, await self._publish([msgs[i] for i in rest]), strict=True):
                out[i] = result
        return out

    async def _publish(self, msgs: Sequence[DelayedMessage]) -> list[Exception | StoredAt | Spooled]:
        results = await self.producer.send_batch(
            [to_wire(m) for m in msgs], [m.sharding_key for m in msgs], validated=True
        )
        out: list[Exception | StoredAt | Spooled] = [
            stored_at(r) if isinstance(r, SendResult) else SPOOLED for r in results
        ]
        now = self.now_ms()
        failed = []
        for i, (m, result) in enumerate(zip(msgs, results, strict=True)):
            if isinstance(result, Exception):  # the same message, now a retry that knows its due time
                record, due = failed_send(m, result, now, self.policy_for(m.type))
                failed.append((i, replace(record, delay_due_ms=m.due_ms), due))
        for i, exc in (await spool_by_due(self.retry, failed)).items():
            out[i] = exc  # stored nowhere: the scheduler keeps it
        return out


def delivery_loops(
    producer: Sender,
    retry: RetryStore,
    delay: DelayStore,
    *,
    policy_for: Callable[[str], RetryPolicy],
    workers: int,
    batch_max: int,
    on_published: Callable[[float, StoredMessage], None],
    on_replayed: Callable[[str], None],
    on_delayed_sent: Callable[[list[RetryRecord]], None] | None = None,
) -> tuple[DelayScheduler, ReplayLoop]:
    """The delay scheduler and the retry replay of a process (the sidecar, a ``dmq`` replica), both
    delivering through one StoreDelivery: a delayed message whose publish fails falls into the retry
    store, and the replay sends it again (``on_published`` hears it then, as the scheduler's own, and
    ``on_delayed_sent``: StoreDelivery.on_delayed_sent)."""
    delivery = StoreDelivery(
        producer, retry, delay, policy_for=policy_for, now_ms=retry.now_ms, on_published=on_published,
        on_delayed_sent=on_delayed_sent, lanes=retry,
    )  # fmt: skip
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
