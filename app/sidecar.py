"""The sidecar's operations, shared by the HTTP and gRPC APIs: send, send a batch, status, cancel.

The promise lives here: an outcome other than an error means the message is stored, either by a broker
(SENT) or synced to the local store (SPOOLED, SCHEDULED). A message the broker refuses for its own sake
(MESSAGE_ILLEGAL) is rejected; any other failure is spooled for the retry store's replay.

A message with a sharding key whose earlier messages wait in the retry store (its lane: retry.lanes) is
not sent: sent now it would be stored before them. It is spooled behind them, untried, and answered
SPOOLED with its lane's head's due time.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from enum import Enum
from typing import Protocol, cast

import msgspec

from rocksidecar.delay import CancelOutcome, DelayedMessage
from rocksidecar.retry.policy import RetryPolicy
from rocksidecar.retry.record import RetryRecord
from rocksidecar.rmq import Message, RocketMQError, Sender, SendResult
from rocksidecar.storage.clock import wall_ms
from rocksidecar.storage.message import StoredMessage
from rocksidecar.storage.status import Status, StoredAtLike

from .delivery_policy import (
    BEHIND,
    Lanes,
    RetrySpool,
    busy_lanes,
    failed_send,
    in_lane_order,
    message_fault,
    spool_in_lane_order,
)
from .request import Prepared, RequestError
from .wire import to_stored

# Status is the stores' vocabulary (storage.status), re-exported: the APIs answer in it, unmapped.
__all__ = [
    "BROKER",
    "SENT",
    "SPOOL",
    "Ack",
    "AllSent",
    "Canceller",
    "DelaySchedule",
    "MessageState",
    "Outcome",
    "Sidecar",
    "StateLookup",
    "Status",
]


class Ack(Enum):
    BROKER = "broker"  # send now; spool durably if every attempt fails, or behind its key's lane (untried)
    SPOOL = "spool"  # answer once synced locally; deliver in the background


# On Python 3.11 reading a member off its Enum class (Status.SENT) goes through a descriptor written in
# Python: 0.1-0.2 us a read, several a message on the hot paths (issue 32). They compare against these.
SENT = Status.SENT
BROKER, SPOOL = Ack.BROKER, Ack.SPOOL
# A batch's fields are read by comprehensions, not map(attrgetter(...)): on 3.11 an attribute read in a
# comprehension is specialised for the Struct's slot, about half of attrgetter's cost a message (issue 32).


class Outcome(msgspec.Struct, gc=False):
    """What became of one message. A Struct, not a dataclass: one per message on the hot path, its
    __init__ in C (half a slots dataclass's instructions, issue 32). Holds a SendResult and plain values:
    no cycle passes through it, so the cyclic GC need not track it."""

    id: str
    status: Status
    stored_at: StoredAtLike | None = None  # SENT: where the broker stored it (the SendResult itself)
    next_attempt_at_ms: int | None = None
    last_error: str | None = None
    deliver_at_ms: int | None = None

    @classmethod
    def sent(cls, result: SendResult) -> Outcome:
        return cls(result.msg_id, SENT, result)


class AllSent(list[Outcome | Exception]):
    """The outcomes of a batch whose every message a broker stored: each an Outcome, SENT, whose
    ``stored_at`` is its SendResult. A list like any other; its type spares the edges a check per item
    (issue 32)."""

    __slots__ = ()


class DelaySchedule(Protocol):
    async def schedule(self, msg: DelayedMessage) -> None: ...

    async def schedule_many(self, msgs: Sequence[DelayedMessage]) -> None:
        """All scheduled, or raises: PartlyScheduled when only some could never be."""
        ...


class PartlyScheduled(Exception):
    """Raised by a schedule_many that scheduled every message but those it refused for good (one too
    large for the Rock-DMQ inner topic): ``refused`` maps each one's index among the messages to the
    error to answer for it, instead of SCHEDULED."""

    def __init__(self, refused: dict[int, RequestError]) -> None:
        super().__init__(f"{len(refused)} message(s) refused: {next(iter(refused.values()), '')}")
        self.refused = refused


@dataclass(frozen=True, slots=True)
class MessageState:
    """Where a spooled, scheduled or dead-lettered message stands (GET /v1/messages/{id})."""

    id: str
    status: Status
    topic: str | None = None
    attempts: int | None = None
    next_attempt_at_ms: int | None = None
    deliver_at_ms: int | None = None
    last_error: str | None = None
    reason: str | None = None
    dead_at_ms: int | None = None  # DEAD
    sent_at_ms: int | None = None  # SENT from the store
    cancelled_at_ms: int | None = None  # CANCELLED
    stored_at: StoredAtLike | None = None  # SENT, where it was stored (when recorded)


class StateLookup(Protocol):
    async def state(self, id: str) -> MessageState | None: ...


class Canceller(Protocol):
    async def cancel(self, id: str) -> CancelOutcome: ...


class Sidecar:
    def __init__(
        self,
        producer: Sender,
        retry: RetrySpool,
        *,
        policy_for: Callable[[str], RetryPolicy],
        delay: DelaySchedule | None = None,
        lookups: Sequence[StateLookup] = (),
        canceller: Canceller | None = None,
        now_ms: Callable[[], int] = wall_ms,
        on_spooled: Callable[[RetryRecord], None] | None = None,
        on_sent: Callable[[float, Message | None], None] | None = None,
        clock: Callable[[], float] = time.perf_counter,
        lanes: Lanes | None = None,
    ) -> None:
        """``lanes``: the retry store's, asked before a message with a sharding key is sent (None: never,
        for a store that keeps no lanes)."""
        self.on_spooled = on_spooled  # after a failed send was spooled (the operator's log)
        # (seconds, the message or a batch's first) once per send to the producer, every attempt of it
        # included, whatever its outcome (Metrics.observe_send); one clock read before, one after
        self.on_sent = on_sent
        self._clock = clock
        self.producer = producer
        self.retry = retry
        self.delay = delay
        self._lookups = tuple(lookups)
        self._canceller = canceller
        self._policy_for = policy_for
        self._now_ms = now_ms
        self._lanes = lanes

    def stored(self, p: Prepared) -> StoredMessage:
        """The one conversion of a prepared request message into the stores' message (created now)."""
        return to_stored(p.message, sharding_key=p.sharding_key, type=p.type, created_ms=self._now_ms())

    def delayed(self, p: Prepared) -> DelayedMessage:
        assert p.deliver_at_ms is not None
        return DelayedMessage(**self.stored(p).message_fields(), due_ms=p.deliver_at_ms)

    async def send(self, p: Prepared, ack: Ack = Ack.BROKER) -> Outcome:
        """Deliver or store one prepared message; raises RequestError or a storage error otherwise."""
        id = p.message.id
        assert id is not None
        if p.deliver_at_ms is not None:
            return await self._schedule(p)
        if p.sharding_key is not None and (lanes := self._lanes) is not None and lanes.lanes_open:
            head_due = lanes.lane_head_due(p.message.topic, p.sharding_key)
            if head_due is not None:
                return await self._spool_behind(p, head_due)
        if ack is SPOOL:
            now = self._now_ms()
            await self.retry.spool(RetryRecord.of(self.stored(p)), now)
            return Outcome(id, Status.SPOOLED, next_attempt_at_ms=now)
        on_sent = self.on_sent
        started = self._clock() if on_sent is not None else 0.0
        try:
            result = await self.producer.send(p.message, sharding_key=p.sharding_key, validated=True)
        except RocketMQError as exc:
            if on_sent is not None:
                on_sent(self._clock() - started, p.message)
            return await self._after_failure(p, exc)
        if on_sent is not None:
            on_sent(self._clock() - started, p.message)
        return Outcome(result.msg_id, SENT, result)  # Outcome.sent inline: a call less a message

    async def _spool_behind(self, p: Prepared, head_due: int) -> Outcome:
        """Spool a message of a key whose lane holds earlier ones, untried: the store queues it behind them
        and it goes right after them (answered: when the first of them is due). Due now should the lane
        have emptied meanwhile: nothing is left to wait for."""
        record = RetryRecord.of(self.stored(p), error=BEHIND)
        await self.retry.spool(record, self._now_ms())
        return Outcome(record.id, Status.SPOOLED, next_attempt_at_ms=head_due, last_error=BEHIND)

    async def _spool_group_behind(
        self, out: list[Outcome | Exception | None], behind: dict[int, Prepared], heads: dict[int, int]
    ) -> None:
        """_spool_behind of several items of a batch (index -> item; its lane's head's due time)."""
        now = self._now_ms()
        group = [(i, RetryRecord.of(self.stored(p), error=BEHIND), now) for i, p in behind.items()]
        await self._spool_group(out, group, failed=False)
        for i, due in heads.items():
            if type(answer := out[i]) is Outcome:
                answer.next_attempt_at_ms = due

    def _delay_store(self) -> DelaySchedule:
        if self.delay is None:  # the edges refuse a delay first when Limits.delay says so
            raise RequestError(
                "delayed delivery is not available in this sidecar",
                field=None,
                status=501,
                title="Not implemented",
            )
        return self.delay

    async def _schedule(self, p: Prepared) -> Outcome:
        await self._delay_store().schedule(self.delayed(p))
        assert p.message.id is not None
        return Outcome(p.message.id, Status.SCHEDULED, deliver_at_ms=p.deliver_at_ms)

    async def _schedule_group(
        self, out: list[Outcome | Exception | None], group: list[tuple[int, Prepared]]
    ) -> None:
        """Schedule several items of a batch in one synced write (all or none, but for those refused)."""
        refused: dict[int, RequestError] = {}
        try:
            await self._delay_store().schedule_many([self.delayed(p) for _, p in group])
        except PartlyScheduled as exc:
            refused = exc.refused
        except Exception as exc:
            for i, _ in group:
                out[i] = exc
            return
        for n, (i, p) in enumerate(group):
            assert p.message.id is not None
            out[i] = refused.get(n) or Outcome(p.message.id, Status.SCHEDULED, deliver_at_ms=p.deliver_at_ms)

    async def _after_failure(self, p: Prepared, exc: RocketMQError) -> Outcome:
        if message_fault(exc):
            raise RequestError(
                f"the broker refused the message: {exc}", field=None, status=422, title="Message refused"
            ) from exc
        record, due = failed_send(self.stored(p), exc, self._now_ms(), self._policy_for(p.type))
        await self.retry.spool(record, due)
        if self.on_spooled is not None:
            self.on_spooled(record)
        return Outcome(record.id, Status.SPOOLED, next_attempt_at_ms=due, last_error=record.last_error)

    async def status(self, id: str) -> MessageState | None:
        for lookup in self._lookups:
            found = await lookup.state(id)
            if found is not None:
                return found
        return None

    async def cancel(self, id: str) -> CancelOutcome:
        if self._canceller is None:
            return CancelOutcome.NOT_FOUND
        return await self._canceller.cancel(id)

    async def send_batch(
        self, items: Sequence[Prepared | RequestError], ack: Ack = Ack.BROKER
    ) -> list[Outcome | Exception]:
        """One outcome (or error) per item, in order; a bad or failing item fails only itself."""
        n = len(items)
        out: list[Outcome | Exception | None] = [None] * n
        lanes = self._lanes
        behind = self._behind(lanes, items) if lanes is not None and lanes.lanes_open else None
        if (
            ack is not SPOOL
            and not behind
            and {Prepared} == set(map(type, items))
            and {None} == {p.deliver_at_ms for p in items}  # type: ignore[union-attr]
        ):
            # The usual batch: every item prepared, for now; found without the loop below. Its
            # outcomes as they came when all were stored.
            stored = await self._send_direct(list(range(n)), items, out)
            if stored is not None:
                return stored
            return [o if o is not None else RuntimeError("no outcome") for o in out]
        delayed: list[int] = []
        spooled: list[int] = []
        direct: list[int] = []
        now_or_spooled = spooled if ack is SPOOL else direct
        for i, item in enumerate(items):
            if isinstance(item, RequestError):
                out[i] = item
            elif item.deliver_at_ms is not None:
                delayed.append(i)
            elif not behind or i not in behind:
                now_or_spooled.append(i)
        jobs: list[Awaitable[object]] = []
        if delayed:
            jobs.append(self._schedule_group(out, [(i, items[i]) for i in delayed]))  # type: ignore[misc]
        if behind:  # their lanes' earlier messages wait in the store: behind them, untried
            held = {i: cast(Prepared, items[i]) for i in behind}
            jobs.append(self._spool_group_behind(out, held, behind))
        if spooled:
            now = self._now_ms()
            group = [(i, RetryRecord.of(self.stored(items[i])), now) for i in spooled]  # type: ignore[arg-type]
            jobs.append(self._spool_group(out, group))
        if direct:
            jobs.append(self._send_direct(direct, items, out))
        if len(jobs) == 1:
            await jobs[0]  # no task of its own
        else:
            await asyncio.gather(*jobs)
        return [o if o is not None else RuntimeError("no outcome") for o in out]

    async def _spool_group(
        self,
        out: list[Outcome | Exception | None],
        group: list[tuple[int, RetryRecord, int]],
        *,
        failed: bool = True,
    ) -> None:
        """Spool (index, record, due) in one synced batch per due time, and answer each index. ``failed``:
        their sends failed (the operator hears of each one with an error)."""
        group = in_lane_order(group)  # the due times spooled, and answered
        refused = await spool_in_lane_order(self.retry, group)
        for i, record, due in group:
            if i in refused:
                out[i] = refused[i]
                continue
            error = record.last_error
            out[i] = Outcome(record.id, Status.SPOOLED, next_attempt_at_ms=due, last_error=error or None)
            if failed and error and self.on_spooled is not None:
                self.on_spooled(record)

    @staticmethod
    def _behind(lanes: Lanes, items: Sequence[Prepared | RequestError]) -> dict[int, int]:
        """The indexes of the items to send now whose lane holds earlier messages, each with its lane's
        head's due time."""
        return busy_lanes(
            lanes,
            (
                (i, p.message.topic, p.sharding_key)
                for i, p in enumerate(items)
                if type(p) is Prepared and p.deliver_at_ms is None
            ),
        )

    async def _send_direct(
        self, idx: list[int], items: Sequence[Prepared | RequestError], out: list[Outcome | Exception | None]
    ) -> AllSent | None:
        """Send the items at ``idx`` and put their outcomes in ``out``; when those are all the items and the
        brokers stored every one, their outcomes are returned instead (``out`` left as it was)."""
        # Every item (the usual batch): the items as they are, no copy.
        every = len(idx) == len(items)
        prepared: Sequence[Prepared] = items if every else [items[i] for i in idx]  # type: ignore[assignment,misc]
        on_sent = self.on_sent
        started = self._clock() if on_sent is not None else 0.0
        results = await self.producer.send_batch(
            [p.message for p in prepared], [p.sharding_key for p in prepared], validated=True
        )
        if on_sent is not None:
            on_sent(self._clock() - started, prepared[0].message)
        sent = SENT
        if every and {SendResult} == set(map(type, results)):
            stored = cast(list[SendResult], results)
            return AllSent([Outcome(r.msg_id, sent, r) for r in stored])  # all stored: one comprehension
        failed: list[tuple[int, RetryRecord, int]] = []
        now = self._now_ms()
        for i, p, result in zip(idx, prepared, results, strict=True):
            if isinstance(result, SendResult):
                out[i] = Outcome(result.msg_id, sent, result)  # Outcome.sent inline: a call less a message
            elif message_fault(result):
                out[i] = RequestError(
                    f"the broker refused the message: {result}",
                    field=None,
                    status=422,
                    title="Message refused",
                )
            else:
                record, due = failed_send(self.stored(p), result, now, self._policy_for(p.type))
                failed.append((i, record, due))
        if failed:
            await self._spool_group(out, failed)
        return None
