"""Transactions across restarts: a resend round carrying out a record it read before the app's repeated commit
carried it out (and the message was delivered) does not spool it again; a decision carried out late is
kept KEEP_DECIDED_MS from then, not purged at once (by its decision time)."""

from __future__ import annotations

import asyncio

from rocksidecar.app.transactions.coordinator import KEEP_DECIDED_MS, LocalOutbox, TransactionCoordinator
from rocksidecar.app.transactions.records import CF, Decision, Record, TransactionRecords
from rocksidecar.retry import RetryStore
from rocksidecar.retry.keys import COLUMN_FAMILIES as RETRY_CFS
from rocksidecar.retry.policy import RetryPolicy
from rocksidecar.retry.record import RetryRecord
from rocksidecar.rmq import Message, SendFailed
from rocksidecar.rmq.message import MessageQueue
from rocksidecar.rmq.producer.transaction import HalfReceipt, TransactionState
from rocksidecar.storage.memory import MemoryKV
from tests.fakes import FakeWallClock

POLICY = RetryPolicy((2.0, 10.0), 5)


class HeldSpool:
    """The retry store, whose spool of ids in ``hold`` waits for the test (``holding`` set meanwhile)."""

    def __init__(self, inner: RetryStore) -> None:
        self.inner = inner
        self.hold: dict[str, asyncio.Event] = {}
        self.holding = asyncio.Event()
        self.keys: dict[str, bytes] = {}
        self.spools = 0

    async def spool_new(self, record: RetryRecord, due_ms: int | None = None) -> bytes | None:
        if record.id in self.hold:
            self.holding.set()
            await self.hold[record.id].wait()
        key = await self.inner.spool_new(record, due_ms)
        if key is not None:
            self.spools += 1
            self.keys[record.id] = key
        return key


class NoBroker:
    checker = None

    async def send_half(self, msg: Message, *, sharding_key: str | None = None) -> HalfReceipt:
        raise SendFailed("no broker", [], None)


async def test_a_commit_carried_out_and_delivered_during_a_resend_round_is_not_spooled_again() -> None:
    """After a restart, the background round reads a page of open records, then carries them out one
    after another. The app repeats its commit of a later one meanwhile (carried out: spooled), and the
    retry pump delivers it (acked: gone from the retry store). The round then reaches the record it
    read before all that and spools the message a second time: delivered twice."""
    clock = FakeWallClock()
    kv = MemoryKV([CF, *RETRY_CFS])
    retry = RetryStore(kv, now_ms=clock.now_ms)
    spool = HeldSpool(retry)

    def coordinator() -> TransactionCoordinator:
        outbox = LocalOutbox(spool, lambda _t: POLICY)  # type: ignore[arg-type]
        return TransactionCoordinator(
            TransactionRecords(kv), NoBroker(), None,  # type: ignore[arg-type]
            now_ms=clock.now_ms, mode="local", outbox=outbox,
        )  # fmt: skip

    first = coordinator()
    a = await first.begin(Message("Orders", b"a"))
    b = await first.begin(Message("Orders", b"b"))
    a, b = sorted((a, b), key=lambda r: r.id)  # the round reads them in id order
    for r in (a, b):  # decisions synced; the process died before carrying them out
        await first.records.put(r.decided(Decision.COMMIT, clock.now_ms()))

    restarted = coordinator()  # SIGKILL: new objects over the same store
    spool.hold[a.id] = release_a = asyncio.Event()
    round_ = asyncio.create_task(restarted.resend())
    await spool.holding.wait()  # the round read [a, b] and is spooling a
    by_app = await restarted.decide(b.id, Decision.COMMIT)  # the app repeats its commit of b
    assert by_app.acknowledged and spool.spools == 1
    await retry.ack(spool.keys[b.id])  # the retry pump delivered b
    release_a.set()
    assert await round_ == 2
    assert retry.get(b.id) is None, "b, delivered already, was spooled (to be delivered) again"
    assert spool.spools == 2  # a and b, once each


class FakeHalves:
    """A TransactionProducer whose broker stores halves and, while ``down``, answers no END."""

    def __init__(self) -> None:
        self.checker = None
        self.down = False
        self.ends: list[tuple[str, TransactionState]] = []

    async def send_half(self, msg: Message, *, sharding_key: str | None = None) -> HalfReceipt:
        assert msg.id is not None
        q = MessageQueue(msg.topic, "broker-a", 0)
        return HalfReceipt("g", msg.id, "broker-a", q, 1, 2, "0A00000100002A9F0000000000000002")

    async def end(self, receipt: HalfReceipt, state: TransactionState, *, timeout_s: float = 3.0) -> None:
        if self.down:
            raise SendFailed("broker unreachable", [], None)
        self.ends.append((receipt.msg_id, state))


async def test_a_decision_carried_out_late_is_kept_a_day_after_it_was_carried_out() -> None:
    """README: "carried-out ones are kept 24 h" and the same decision again answers 200. A commit
    whose END the broker could not take for more than a day is carried out by a round, and the same
    round's purge forgets it at once (purge goes by decision time): the app repeating its commit, or
    asking where it stands, is told no such transaction exists (404)."""
    clock = FakeWallClock()
    halves = FakeHalves()
    c = TransactionCoordinator(
        TransactionRecords(MemoryKV([CF])),
        halves,
        None,
        now_ms=clock.now_ms,  # type: ignore[arg-type]
    )
    begun = await c.begin(Message("Orders", b"x", id="7F0000010000000000000000000000AA"))
    halves.down = True
    decided = await c.decide(begun.id, Decision.COMMIT)  # 200, synced, not acknowledged
    assert decided.decision is Decision.COMMIT and not decided.acknowledged
    clock.wall_ms += KEEP_DECIDED_MS + 60_000
    halves.down = False
    await c.maintain()  # the broker is back: the round carries it out (and purges)
    assert halves.ends == [(begun.id, TransactionState.COMMIT)]
    kept = c.records.get(begun.id)
    assert kept is not None, "carried out a moment ago, already forgotten: GET and a repeated commit are 404"
    assert isinstance(kept, Record) and kept.acknowledged
