"""Begin, decide and check transactions, in broker mode (RocketMQ half messages) or in the local outbox.

Broker mode: begin stores the half with a broker, then syncs its receipt; commit/rollback syncs the
decision, then sends END_TRANSACTION to the broker that holds the half. A broker's check-back is
answered from the record when it holds a decision, else by the app (``ask_app``), as Java's
checkLocalTransaction.

Local outbox (mode ``local``, or ``auto`` when no broker stored the half): begin syncs the message in the
record; commit syncs the decision, then turns the message into an ordinary retry record (app.
delivery_policy.failed_send: delivered on the type's ladder, never lost); rollback drops the message.
An undecided one older than ``undecided_timeout_ms`` is checked with the app, as a broker would. A
broker's check of a half under a local transaction's id (mode auto: the half was stored after all,
degraded with its rollback lost, or after its send timed out) is answered ROLLBACK: the outbox carries
the message.

A decision not yet carried out (the broker did not acknowledge it, or the process died before the
spool) is carried out again by ``resend``, at start and periodically (``maintain``).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Coroutine
from dataclasses import dataclass, field
from typing import Any, Protocol, TypeVar

from rocksidecar.retry.policy import RetryPolicy
from rocksidecar.retry.record import RetryRecord
from rocksidecar.rmq.errors import RocketMQError
from rocksidecar.rmq.message import Message
from rocksidecar.rmq.msgid import new_uniq_id
from rocksidecar.rmq.producer.transaction import CheckRequest, TransactionProducer, TransactionState
from rocksidecar.rmq.singleflight import SingleFlight
from rocksidecar.storage.errors import StorageError, UnsyncedError

from ..delivery_policy import failed_send, message_fault
from ..wire import to_stored
from .observed import CHECKED_OUTCOME, DECIDED_OUTCOME, TransactionStats
from .records import NOT_CARRIED_OUT, UNDECIDED_LOCAL, Decision, Record, TransactionRecords

log = logging.getLogger(__name__)
_T = TypeVar("_T")

# The app's answer for an undecided transaction: its id, its transactionKey (None if unknown here) and
# its topic (app_check.AppCheck asks the app's check endpoint).
AskApp = Callable[[str, str | None, str], Awaitable[TransactionState]]


class TransactionNotFound(LookupError):
    """No transaction has this id here (HTTP 404)."""


class TransactionConflict(Exception):
    """The transaction was decided the other way already (HTTP 409)."""


class LocalCommit(Exception):
    """Why a committed outbox message is in the retry store: the last error its retry record shows."""


MODES = ("broker", "local", "auto")
# check_undecided asks the app this many at once, and starts no new wave after ASK_ROUND_MS: an app that
# hangs holds a round for one wave (its timeout), not for every stale transaction one after another.
ASK_WAVE = 8
ASK_ROUND_MS = 5_000
# Open-index entries a round's resend (and its check_undecided) reads at most: rounds stay bounded
# however many transactions are open, and go on where the last one stopped.
ROUND_ENTRIES = 10_000
KEEP_DECIDED_MS = 24 * 3600 * 1000  # a carried-out transaction answers status and repeats this long


class OutboxSpool(Protocol):
    """The retry store as the local outbox writes into it (retry.store.RetryStore)."""

    async def spool_new(self, record: RetryRecord, due_ms: int | None = None) -> bytes | None: ...


@dataclass(frozen=True)
class LocalOutbox:
    """What the local outbox needs: the retry store a committed message goes to, and its type's policy."""

    retry: OutboxSpool
    policy_for: Callable[[str], RetryPolicy]
    undecided_timeout_ms: int = 60_000


@dataclass
class _Turn:
    """A transaction's lock (TransactionCoordinator._turn) and how many hold or await it."""

    lock: asyncio.Lock = field(default_factory=asyncio.Lock)
    users: int = 0


def _wall_ms() -> int:
    return time.time_ns() // 1_000_000


class TransactionCoordinator:
    def __init__(
        self,
        records: TransactionRecords,
        producer: TransactionProducer,
        ask_app: AskApp | None,
        *,
        now_ms: Callable[[], int] = _wall_ms,
        mode: str = "broker",
        outbox: LocalOutbox | None = None,
    ) -> None:
        if mode not in MODES:
            raise ValueError(f"mode must be one of {', '.join(MODES)}, got {mode!r}")
        if mode != "broker" and outbox is None:
            raise ValueError(f"mode {mode} needs the local outbox (the retry store)")
        self.records, self.producer, self.mode = records, producer, mode
        self._outbox, self._ask_app, self._now_ms = outbox, ask_app, now_ms
        # Where the next round's resend and check_undecided start in the open index (ids)
        self._resent_up_to = self._asked_up_to = b""
        self.stats = TransactionStats(records, now_ms)  # what /metrics, the admin API and /ui tell
        self._carrying = SingleFlight[str, Record]()  # local commits being carried out, by transaction id
        self._turns: dict[str, _Turn] = {}  # transactions being decided (_turn)
        self._writing: set[asyncio.Task[Any]] = set()  # _counted's writes, whose callers may be gone
        producer.checker = self.check  # the brokers' checks are answered from the records

    async def begin(
        self,
        msg: Message,
        *,
        transaction_key: str | None = None,
        sharding_key: str | None = None,
        message_type: str = "",
    ) -> Record:
        """Store the half and sync its record; in the local outbox (mode local, or auto when no broker
        stored the half) sync the message itself. Raises SendFailed (mode broker: no broker stored the
        half) or a final error (the broker refused the message: never kept locally either)."""
        record = await self._begin(msg, transaction_key, sharding_key, message_type)
        await self._counted(self._put(record, lambda: self.stats.begun(record)))
        return record

    async def _counted(self, work: Coroutine[Any, Any, _T]) -> _T:
        """Await ``work`` (a synced write and the stats that follow it) as a task of its own: a caller
        cancelled while its write waits for the group commit (a gRPC deadline) is gone, but its ops are
        written all the same, and the stats must hear of them (else the undecided gauge counts a decided
        transaction until a restart)."""
        task = asyncio.create_task(work)
        self._writing.add(task)
        task.add_done_callback(self._writing.discard)
        return await asyncio.shield(task)

    async def _put(self, record: Record, count: Callable[[], None]) -> None:
        """Sync ``record``, then ``count`` it in the stats once the store holds it: written, or applied with
        only its WAL sync failed (UnsyncedError, raised all the same: nobody is told it is durable; but
        it is read, asked about and carried out like any other, and nothing writes it again, so it is
        counted now or never)."""
        try:
            await self.records.put(record)
        except UnsyncedError:
            count()
            raise
        count()

    async def _begin(
        self, msg: Message, transaction_key: str | None, sharding_key: str | None, message_type: str
    ) -> Record:
        """The record of a begun transaction, for begin to sync: of the half a broker stored, or of the
        local outbox's message."""
        if msg.id is None:  # the half's UNIQ_KEY, and the outbox's id should auto mode fall back to it
            msg.id = new_uniq_id()
        if self.mode == "local":
            return self._begin_local(msg, transaction_key, sharding_key, message_type)
        try:
            receipt = await self.producer.send_half(msg, sharding_key=sharding_key)
        except RocketMQError as exc:
            if self.mode == "broker" or message_fault(exc):
                raise
            log.info("transaction %s begun in the local outbox: no broker stored the half (%s)", msg.id, exc)
            return self._begin_local(msg, transaction_key, sharding_key, message_type)
        return Record(receipt.msg_id, receipt, self._now_ms(), transaction_key)

    def _begin_local(
        self, msg: Message, key: str | None, sharding_key: str | None, message_type: str
    ) -> Record:
        assert msg.id is not None  # _begin gave it one
        now = self._now_ms()
        stored = to_stored(msg, sharding_key=sharding_key, type=message_type or msg.topic, created_ms=now)
        return Record(msg.id, None, now, key, message=stored)

    async def decide(self, tx_id: str, decision: Decision) -> Record:
        """Sync ``decision`` then send it. Deciding the same way again answers the same record (and
        re-sends it if the broker never acknowledged it); the other way raises TransactionConflict."""
        if decision is Decision.NONE:
            raise ValueError("a decision is COMMIT or ROLLBACK")
        record, _taken = await self._record(tx_id, decision, DECIDED_OUTCOME[decision])
        if not record.acknowledged:
            record = await self._carry_out(record)
        return record

    async def _record(self, tx_id: str, decision: Decision, outcome: str) -> tuple[Record, bool]:
        """The record holding ``decision``, synced, and whether this call took it (False: it was taken
        already), counted as ``outcome`` (observed.OUTCOMES: who decided). Raises TransactionNotFound,
        or TransactionConflict when it holds the other decision. Taken whole as one task (_counted): the
        turn is held until the write lands and is counted, even when the caller is cancelled meanwhile;
        else a decision the other way could read the record still undecided and be counted too."""
        return await self._counted(self._take(tx_id, decision, outcome))

    async def _take(self, tx_id: str, decision: Decision, outcome: str) -> tuple[Record, bool]:
        async with self._turn(tx_id):
            record = self.records.get(tx_id)
            if record is None:
                raise TransactionNotFound(tx_id)
            if record.decision is decision:
                return record, False
            if record.decision is not Decision.NONE:
                raise TransactionConflict(f"transaction {tx_id} is already {record.decision.value}")
            record = record.decided(decision, self._now_ms())
            # synced before anyone hears of the decision
            await self._put(record, lambda: self.stats.decided(tx_id, outcome))
            return record, True

    @contextlib.asynccontextmanager
    async def _turn(self, tx_id: str) -> AsyncIterator[None]:
        """Hold ``tx_id``'s turn: one read-decide-write of a transaction at a time. Its record is read
        before the synced write of a decision and that write awaits the group commit, so without it a
        commit and a rollback at once (or the app's decision and a check's answer) both found it
        undecided and both won. The lock exists while someone holds or awaits it: the map holds the
        transactions being decided, not every one ever decided."""
        turn = self._turns.get(tx_id)
        if turn is None:
            turn = self._turns[tx_id] = _Turn()
        turn.users += 1
        try:
            async with turn.lock:
                yield
        finally:
            turn.users -= 1
            if not turn.users:
                del self._turns[tx_id]

    async def _carry_out(self, record: Record) -> Record:
        """Carry out ``record``'s decision. A local commit, once at a time per transaction: a caller that
        comes while it is under way (the app repeating its commit while ``resend`` carries it out) waits
        for that one and gets its answer, rather than spooling the message a second time; it runs as a
        task of its own (rmq.singleflight), which a caller that goes away does not stop halfway. Done
        twice, the rest is harmless (an END_TRANSACTION the broker tolerates, a record written again)."""
        if record.receipt is not None:
            return await self._send(record)
        if record.decision is not Decision.COMMIT:
            return await self._settle_local(record)
        return await self._carrying.run(record.id, lambda: self._settle_fresh(record))

    async def _settle_fresh(self, record: Record) -> Record:
        """``_settle_local`` of the record as stored now: ``record`` may have been read many awaits ago
        (a resend round's page) and carried out meanwhile by the app's repeated commit, its message even
        delivered and gone from the retry store, where spool_new could no longer see it (spooled again:
        delivered twice)."""
        now = self.records.get(record.id)
        if now is None or now.acknowledged:
            return now or record
        return await self._settle_local(now)

    async def _settle_local(self, record: Record) -> Record:
        """A committed outbox message becomes a retry record; a rolled-back one is dropped. Done again (a
        restart after the spool, before the record said so), it finds the message in the retry store,
        on any rung or dead, and writes nothing: no second copy, not counted twice."""
        if record.decision is Decision.COMMIT and record.message is not None:
            assert self._outbox is not None and record.decided_ms is not None
            why = LocalCommit(f"committed in the local outbox (transactions mode {self.mode})")
            policy = self._outbox.policy_for(record.message.type)
            retry, due = failed_send(record.message, why, record.decided_ms, policy)
            await self._outbox.retry.spool_new(retry, due)  # not a second copy (a restart redoes this)
        done = record.carried_out(self._now_ms())
        await self.records.put(done, sync=record.decision is Decision.ROLLBACK)  # the drop: synced
        return done

    async def _send(self, record: Record) -> Record:
        assert record.receipt is not None
        try:
            await self.producer.end(record.receipt, record.decision.state)
        except RocketMQError as exc:  # the record holds the decision: resend or a check delivers it
            log.warning("END_TRANSACTION of %s not acknowledged: %s", record.id, exc)
            return record
        acked = record.carried_out(self._now_ms())  # a broker record holds no message
        await self.records.put(acked, sync=False)  # losing it costs one more END, which the broker tolerates
        return acked

    async def resend(self) -> int:
        """Carry out again decisions not yet carried out (the broker did not acknowledge it, or the
        process died before the spool); returns how many now are. Reads at most ROUND_ENTRIES of the
        open index; the next call goes on after the last one read."""
        done = 0
        for page, last in self.records.open_ring(self._resent_up_to, NOT_CARRIED_OUT, ROUND_ENTRIES):
            for record in page:
                if (await self._carry_out(record)).acknowledged:
                    done += 1
            self._resent_up_to = last
        return done

    async def check_undecided(self) -> int:
        """Ask the app about local transactions undecided for longer than the timeout (no broker asks
        about those) and carry out its answer; returns how many it decided. ASK_WAVE at once, no new wave
        after ASK_ROUND_MS (the background round re-sends and announces too), at most ROUND_ENTRIES of
        the open index read; the next call goes on after the last one asked or read."""
        if self._outbox is None or self._ask_app is None:
            return 0
        ask = self._ask_app
        now = self._now_ms()
        cutoff, deadline = now - self._outbox.undecided_timeout_ms, now + ASK_ROUND_MS
        decided = 0
        for page, last in self.records.open_ring(self._asked_up_to, UNDECIDED_LOCAL, ROUND_ENTRIES):
            stale = [r for r in page if r.created_ms <= cutoff]
            for start in range(0, len(stale), ASK_WAVE):
                if self._now_ms() >= deadline:
                    return decided
                wave = stale[start : start + ASK_WAVE]
                states = await asyncio.gather(*(ask(r.id, r.transaction_key, r.topic) for r in wave))
                self._asked_up_to = wave[-1].id.encode()
                for record, state in zip(wave, states, strict=True):
                    if state is TransactionState.UNKNOWN:
                        self._unknown(record.id)
                    elif await self._take_answer(record.id, state):
                        decided += 1
            self._asked_up_to = last
        return decided

    def _unknown(self, tx_id: str) -> None:
        """The app's check of ``tx_id`` (a broker's or the local outbox's) answered UNKNOWN: counted
        ``unknown`` if it is still undecided (the app may have decided it while it was asked); it is
        asked again later."""
        now = self.records.get(tx_id)
        if now is not None and now.decision is Decision.NONE:
            self.stats.asked_again()

    async def _take_answer(self, tx_id: str, state: TransactionState) -> bool:
        """Decide a local transaction as the app's check answered, and carry it out; False when the
        app's own decision (or the record's removal) came while it was asked: that one stands, and the
        rest of the round goes on."""
        decision = Decision.of(state)
        try:
            record, taken = await self._record(tx_id, decision, CHECKED_OUTCOME[decision])
        except (TransactionNotFound, TransactionConflict) as exc:
            log.info("transaction %s: the app's check answered %s, not taken: %s", tx_id, state.name, exc)
            return False
        if not taken:  # the app decided it the same way meanwhile: its decide carries it out
            return False
        if not record.acknowledged:
            await self._carry_out(record)
        return True

    async def maintain(self) -> None:
        """One round of the background loop: index records of an earlier version's store (once), re-send,
        ask about stale local ones, forget old decided ones."""
        try:  # a store not writable yet (opened read-only on a full disk) must not stop the re-sends
            swept = self.records.sweep()
        except StorageError as exc:
            log.warning("transactions: records of an earlier version not indexed yet: %s", exc)
            swept = []
        for record in swept:
            if record.decision is Decision.NONE:
                self.stats.begun(record)
        await self.resend()
        await self.check_undecided()
        self.records.purge(self._now_ms() - KEEP_DECIDED_MS)

    async def check(self, request: CheckRequest) -> TransactionState:
        """A broker asks: the record's decision, else the app's answer (UNKNOWN without an app); ROLLBACK
        for a transaction the local outbox carries."""
        record = self.records.get(request.msg_id)
        if record is not None and record.local:
            # Begun in the local outbox, which carries the message: no broker holds a half of it as ours.
            # This half is one stored all the same (degraded, its rollback lost, or after the send timed
            # out, in mode auto): committed, it would be a second copy. Counted nowhere: it decides
            # nothing of the transaction.
            return TransactionState.ROLLBACK
        if record is not None and record.decision is not Decision.NONE:
            return record.decision.state
        state = TransactionState.UNKNOWN
        if self._ask_app is not None:
            key = record.transaction_key if record is not None else None
            state = await self._ask_app(request.msg_id, key, request.message.topic)
        if record is None:
            return state
        if state is TransactionState.UNKNOWN:
            self._unknown(record.id)
            return state
        # The app was asked for up to the check's timeout: a decision it took meanwhile is read again
        # and wins (_answer_checked), under the turn, which the write holds to its end as _record's.
        return await self._counted(self._answer_checked(record.id, state))

    async def _answer_checked(self, tx_id: str, state: TransactionState) -> TransactionState:
        """Take the app's answer ``state`` to a broker's check of ``tx_id``, undecided when it was read;
        the broker is told what this returns. A decision taken meanwhile not acknowledged yet is what the
        broker is told; acknowledged, the broker acted on it already (told COMMIT again, it would deliver
        the message a second time), and UNKNOWN changes nothing there: should it ask again, the record
        answers."""
        async with self._turn(tx_id):
            now = self.records.get(tx_id)
            if now is None:  # forgotten meanwhile: nothing to record
                return state
            if now.decision is not Decision.NONE:
                return TransactionState.UNKNOWN if now.acknowledged else now.decision.state
            # acknowledged: the broker acts on the answer to its own check
            decision = Decision.of(state)
            decided = now.decided(decision, self._now_ms()).carried_out(self._now_ms())
            await self._put(decided, lambda: self.stats.decided(tx_id, CHECKED_OUTCOME[decision]))
        return state
