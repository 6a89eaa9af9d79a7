"""The sidecar's side of Rock-DMQ service mode (``ROCKSIDECAR_DELAY_MODE=service``).

A delayed request is wrapped in the inner format (app.dmq.inner) and sent to the inner topic with its id
as the sharding key; it is answered 202 SCHEDULED once a broker stored it, or once it is synced to the
local retry store when no broker takes it (the replay loop then delivers the inner message, so the
promise holds). The sidecar records what it forwarded (id, topic, due time) in its own column family, so
status by id answers SCHEDULED until the due time. Cancel sends a cancel message to the same inner queue;
see the README for what a cancel racing the due time means.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import KW_ONLY, dataclass, field

import orjson

from rocksidecar.delay import CancelOutcome, DelayedMessage
from rocksidecar.retry.policy import RetryPolicy
from rocksidecar.retry.record import RetryRecord
from rocksidecar.rmq import Message, RocketMQError
from rocksidecar.rmq.msgid import new_uniq_id
from rocksidecar.rmq.sender import Sender
from rocksidecar.storage.group_commit import GroupCommitWriter
from rocksidecar.storage.kv import KV, Delete, Op, Put

from ..delivery_policy import RetrySpool, failed_send, message_fault, spool_by_due
from ..request import RequestError
from ..sidecar import Canceller, MessageState, PartlyScheduled, Status
from ..wire import to_stored, to_wire
from .inner import DEFAULT_INNER_TOPIC, cancel_message, inner_message

log = logging.getLogger(__name__)

FORWARDED_CF = "dmq_forwarded"  # id -> {"topic", "due", "cancelled"}: what this sidecar forwarded
COLUMN_FAMILIES = (FORWARDED_CF,)
RETENTION_MS = 24 * 3600 * 1000  # a record is dropped this long after its due time
# The purge reads records in key order (ids: not by due time) from where its last round stopped, a chunk
# of PURGE_SCAN at a time (one short hold of the event loop each: ~4 ms on RocksDB), up to
# PURGE_ROUND_SCAN a round: a round every PURGE_EVERY_S visits ~3 300 records a second, far above what a
# sidecar forwards, so every record is seen within a bounded time of expiring.
PURGE_SCAN = 10_000
PURGE_ROUND_SCAN = 200_000
PURGE_EVERY_S = 60.0


@dataclass
class Forwarder:
    """DelaySchedule, StateLookup and Canceller of the sidecar in service mode. ``fallback`` answers
    cancels of ids this sidecar did not forward (delayed locally before the mode changed)."""

    producer: Sender  # the sidecar's producer (timed: app.metrics.TimedSender)
    retry: RetrySpool
    kv: KV
    writer: GroupCommitWriter
    _: KW_ONLY
    policy_for: Callable[[str], RetryPolicy]
    now_ms: Callable[[], int]
    inner_topic: str = DEFAULT_INNER_TOPIC
    fallback: Canceller | None = None
    on_spooled: Callable[[RetryRecord], None] | None = None  # as the sidecar's (the operator's log)
    # Takes an inner message spooled here back out of the retry store before it was ever sent (True:
    # all of it, none in flight): RetryStore.withdraw. None: cancels are always sent.
    withdraw: Callable[[str, Sequence[Op]], Awaitable[bool]] | None = None
    # How far ``now_ms``'s clock leads the wall clock (SteadyClock.lead_ms: after a step back): due times
    # here are on that clock; the service reads the inner message's as a wall time.
    lead_ms: Callable[[], int] = lambda: 0
    # where the next purge chunk starts (None: the first key); kept across rounds, in memory only (a
    # restart begins a new pass)
    _purge_from: bytes | None = field(init=False, default=None)

    # --- DelaySchedule -----------------------------------------------------------------------------
    async def schedule(self, msg: DelayedMessage) -> None:
        try:
            await self.schedule_many((msg,))
        except PartlyScheduled as exc:
            raise exc.refused[0] from None

    async def schedule_many(self, msgs: Sequence[DelayedMessage]) -> None:
        """Stored by a broker, or synced to the retry store, or raises (then nothing is answered 2xx).
        The forwarded record is written before the answer, so a status asked after it finds it. A
        message no broker can ever take as wrapped (too large with the inner format's properties, or
        refused by the broker) is neither spooled nor recorded: PartlyScheduled names it, answered 422
        (spooled, it would be answered SCHEDULED and only retried to the dead letters)."""
        wrapped = [self._wrap(m) for m in msgs]
        results = await self.producer.send_batch(wrapped, [m.id for m in msgs], validated=False)
        failed: list[tuple[Message, str, BaseException, int]] = []
        refused: dict[int, RequestError] = {}
        for n, (w, r, m) in enumerate(zip(wrapped, results, msgs, strict=True)):
            if not isinstance(r, Exception):
                continue
            if message_fault(r):
                refused[n] = RequestError(
                    f"the message, wrapped for the Rock-DMQ inner topic (with its topic, due time and "
                    f"sharding key), is refused: {r}",
                    field=None,
                    status=422,
                    title="Message refused",
                )
            else:
                failed.append((w, m.id, r, m.created_ms))
        if failed:
            await self._spool(failed)
        forwarded = [
            Put(FORWARDED_CF, m.id.encode(), orjson.dumps({"topic": m.topic, "due": m.due_ms}))
            for n, m in enumerate(msgs)
            if n not in refused
        ]
        if forwarded:
            await self.writer.write(forwarded)
        if refused:
            raise PartlyScheduled(refused)

    def _wrap(self, m: DelayedMessage) -> Message:
        due = m.due_ms - self.lead_ms()  # as a wall time (a step back of ours must not make it late there)
        return inner_message(to_wire(m), due, inner_topic=self.inner_topic, sharding_key=m.sharding_key)

    async def _spool(self, failed: Sequence[tuple[Message, str, BaseException, int]]) -> None:
        """Spool inner messages whose send failed, as the sidecar spools its own: each (wrapped message,
        its sharding key, its error, when it was created) becomes a retry by the one conversion, on the
        inner topic's ladder. The sharding key is the one its direct send used (the id of the message it
        carries, or that a cancel cancels): replayed, it reaches the same inner queue, so the same
        replica, as that send would have. Raises when nothing was stored (then nothing is answered 2xx)."""
        now = self.now_ms()
        policy = self.policy_for(self.inner_topic)
        spooled = [
            failed_send(to_stored(w, sharding_key=key, type=w.topic, created_ms=created), exc, now, policy)
            for w, key, exc, created in failed
        ]
        errors = await spool_by_due(self.retry, [(i, record, due) for i, (record, due) in enumerate(spooled)])
        if errors:
            raise next(iter(errors.values()))
        if self.on_spooled is not None:
            for record, _ in spooled:
                self.on_spooled(record)

    # --- StateLookup -------------------------------------------------------------------------------
    def _record(self, id: str) -> dict[str, object] | None:
        raw = self.kv.get(FORWARDED_CF, id.encode())
        if raw is None:
            return None
        rec = orjson.loads(raw)
        return rec if isinstance(rec, dict) else None

    def forwarded(self, id: str) -> tuple[str, int] | None:
        """(the app's topic, the due time) of a message this sidecar forwarded, None for another id: what
        a status of its inner message, while the retry store holds it, names (app.lookups.RetryLookup)
        instead of the inner topic the app never sent to."""
        rec = self._record(id)
        return None if rec is None else (str(rec["topic"]), int(str(rec["due"])))

    async def state(self, id: str) -> MessageState | None:
        """SCHEDULED until its due time, CANCELLED once a cancel was sent, then SENT: after the due time
        the service has published it (barring an outage) and the sidecar cannot tell more. SENT names
        no sentAt: when it went out, and where, is known only to the service (the real topic has it);
        its deliverAt is the due time."""
        rec = self._record(id)
        if rec is None:
            return None
        due, topic = int(str(rec["due"])), str(rec["topic"])
        if "cancelled" in rec:
            cancelled = int(str(rec["cancelled"]))
            return MessageState(
                id, Status.CANCELLED, topic=topic, deliver_at_ms=due, cancelled_at_ms=cancelled
            )
        if self.now_ms() < due:
            return MessageState(id, Status.SCHEDULED, topic=topic, deliver_at_ms=due)
        return MessageState(id, Status.SENT, topic=topic, deliver_at_ms=due)

    # --- Canceller ---------------------------------------------------------------------------------
    async def cancel(self, id: str) -> CancelOutcome:
        """CANCELLED once the cancel message is stored by a broker (or spooled); ALREADY_SENT when the due
        time has passed. A cancel that reaches the service's replica after it published the message does
        nothing there: the caller was told CANCELLED only if it was sent before the due time."""
        rec = self._record(id)
        if rec is None:
            return await self.fallback.cancel(id) if self.fallback else CancelOutcome.NOT_FOUND
        if "cancelled" in rec:
            return CancelOutcome.CANCELLED
        now = self.now_ms()
        if now >= int(str(rec["due"])):
            return CancelOutcome.ALREADY_SENT
        # Its inner message still spooled here (a broker unreachable when it was scheduled) never reached
        # the service: taken back, it never will. Else a spooled cancel could reach the service after it
        # (replayed later on its ladder, the message overdue by then: published at once, the cancel too
        # late), and the CANCELLED answered would not hold.
        # Taken back, the message's deletion and this record are one write: a failed one (answered 503)
        # leaves the message on its way and SCHEDULED, as the 503 says (written apart, a full disk could
        # delete it and fail the record: SCHEDULED answered for a message gone).
        cancelled = [Put(FORWARDED_CF, id.encode(), orjson.dumps({**rec, "cancelled": now}))]
        if self.withdraw is not None and await self.withdraw(id, cancelled):
            return CancelOutcome.CANCELLED
        msg = cancel_message(id, inner_topic=self.inner_topic)
        msg.id = new_uniq_id()  # its own id: spooled, it must not collide with the message's
        try:
            await self.producer.send(msg, sharding_key=id)
        except RocketMQError as exc:
            # Its message's id, not the cancel's own: the cancel must reach the replica that holds it.
            await self._spool([(msg, id, exc, now)])
        # A failed write here is answered 503 with the cancel on its way: a retried cancel sends another
        # (a second cancel of one message changes nothing at the service) and then records it.
        await self.writer.write(cancelled)
        return CancelOutcome.CANCELLED

    async def purge(self, limit: int = PURGE_SCAN, round_limit: int = PURGE_ROUND_SCAN) -> int:
        """One round: drop records RETENTION_MS past their due time, scanning on from where the last
        round stopped, ``limit`` records a chunk, until the end of the keys (the next round starts over
        from the first) or ``round_limit`` records (the next round goes on from there). How many it
        dropped."""
        dropped = scanned = 0
        while scanned < round_limit:
            chunk = await self._purge_chunk(min(limit, round_limit - scanned))
            dropped += chunk.dropped
            scanned += chunk.scanned
            if self._purge_from is None:  # reached the end: a round visits each record once at most
                break
            await asyncio.sleep(0)  # between chunks, the rest of the loop's work runs
        return dropped

    async def _purge_chunk(self, limit: int) -> _Chunk:
        horizon = self.now_ms() - RETENTION_MS
        rows = self.kv.scan(FORWARDED_CF, lower=self._purge_from, limit=limit)
        ops: list[Op] = []
        for key, raw in rows:
            if int(orjson.loads(raw)["due"]) < horizon:
                ops.append(Delete(FORWARDED_CF, key))
        if ops:
            await self.writer.write(ops)
        # past the last key read (its immediate successor), or from the first once the end was reached
        self._purge_from = rows[-1][0] + b"\x00" if len(rows) == limit else None
        return _Chunk(len(rows), len(ops))


@dataclass(frozen=True, slots=True)
class _Chunk:
    scanned: int
    dropped: int
