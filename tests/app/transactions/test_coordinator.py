"""The sidecar's transaction coordinator in broker mode against devbroker (issue 29): the bad-input rules
(404, 409, an idempotent repeat), decisions synced before they are sent and re-sent after the broker
was unreachable, and check-backs answered from the record or, for an undecided transaction, by the app,
also by a coordinator started afresh over the same records (a restarted sidecar)."""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field

import pytest

from rocksidecar.app.transactions.coordinator import (
    TransactionConflict,
    TransactionCoordinator,
    TransactionNotFound,
)
from rocksidecar.app.transactions.observed import DECIDED_OUTCOME
from rocksidecar.app.transactions.records import CF, Decision, Record, TransactionRecords
from rocksidecar.devbroker import DevCluster
from rocksidecar.rmq import ClientInstance, Message
from rocksidecar.rmq.broker import TRANSACTION_COMMIT_TYPE, TRANSACTION_ROLLBACK_TYPE
from rocksidecar.rmq.producer import Producer, ProducerConfig
from rocksidecar.rmq.producer.transaction import CheckRequest, TransactionProducer, TransactionState
from rocksidecar.storage.group_commit import GroupCommitWriter
from rocksidecar.storage.memory import MemoryKV
from tests.fakes import FakeWallClock

TOPIC = "TxApp"
GROUP = "tx_app"


@dataclass
class Sidecar:
    """What a sidecar process holds: its client, producer and coordinator over the shared records."""

    instance: ClientInstance
    producer: Producer
    tx: TransactionProducer
    coordinator: TransactionCoordinator

    async def close(self) -> None:
        await self.tx.close()
        await self.producer.close()
        await self.instance.close()


@dataclass
class Env:
    cluster: DevCluster
    clock: FakeWallClock
    records: TransactionRecords
    app_answers: dict[str, TransactionState] = field(default_factory=dict)
    app_asked: list[tuple[str, str | None]] = field(default_factory=list)
    decided: dict[int, asyncio.Future[int]] = field(default_factory=dict)
    # While ``app_held`` is not set, the app's check endpoint, once asked, sets ``app_asking`` and waits
    app_held: asyncio.Event | None = None
    app_asking: asyncio.Event = field(default_factory=asyncio.Event)

    async def sidecar(self) -> Sidecar:
        instance = ClientInstance(self.cluster.namesrv_addr)
        producer = Producer(instance.namesrv, instance.api, ProducerConfig(group=GROUP), instance=instance)

        async def ask_app(tx_id: str, key: str | None, topic: str) -> TransactionState:
            assert topic == TOPIC
            self.app_asked.append((tx_id, key))
            if self.app_held is not None:
                self.app_asking.set()
                await self.app_held.wait()
            return self.app_answers.get(tx_id, TransactionState.UNKNOWN)

        tx = TransactionProducer(producer, GROUP)
        coordinator = TransactionCoordinator(self.records, tx, ask_app, now_ms=self.clock.now_ms)
        await producer.start()
        tx.start()
        return Sidecar(instance, producer, tx, coordinator)

    def real(self) -> list[str | None]:
        return sorted((m.uniq_key for b in self.cluster.brokers.values() for m in b.messages(TOPIC)), key=str)

    def watch(self, half_offset: int) -> asyncio.Future[int]:
        fut = self.decided[half_offset] = asyncio.get_running_loop().create_future()
        return fut


@pytest.fixture
def env(cluster: DevCluster, clock: FakeWallClock) -> Env:
    env = Env(cluster, clock, TransactionRecords(MemoryKV([CF])))

    def on_decided(offset: int, kind: int) -> None:
        fut = env.decided.get(offset)
        if fut is not None and not fut.done():
            fut.set_result(kind)

    for broker in cluster.brokers.values():
        broker.transactions.on_decided = on_decided
    return env


async def test_commit_rollback_repeat_conflict_and_unknown(env: Env) -> None:
    s = await env.sidecar()
    try:
        a = await s.coordinator.begin(Message(TOPIC, b"a"), transaction_key="order-1")
        b = await s.coordinator.begin(Message(TOPIC, b"b"))
        assert env.records.get(a.id) == a and a.decision is Decision.NONE
        committed = await s.coordinator.decide(a.id, Decision.COMMIT)
        assert committed.decision is Decision.COMMIT and committed.acknowledged
        again = await s.coordinator.decide(a.id, Decision.COMMIT)
        assert again == committed  # idempotent, and no second END: the broker stored it once
        with pytest.raises(TransactionConflict):
            await s.coordinator.decide(a.id, Decision.ROLLBACK)
        await s.coordinator.decide(b.id, Decision.ROLLBACK)
        with pytest.raises(TransactionConflict):
            await s.coordinator.decide(b.id, Decision.COMMIT)
        with pytest.raises(TransactionNotFound):
            await s.coordinator.decide("nope", Decision.COMMIT)
        assert env.real() == [a.id]
        assert env.records.open() == []
    finally:
        await s.close()


async def test_decision_synced_while_broker_down_is_resent(env: Env) -> None:
    s = await env.sidecar()
    broker = next(iter(env.cluster.brokers.values()))
    try:
        r = await s.coordinator.begin(Message(TOPIC, b"x"))
        await broker.stop()
        decided = await s.coordinator.decide(r.id, Decision.COMMIT)
        assert decided.decision is Decision.COMMIT and not decided.acknowledged
        assert env.records.get(r.id) == decided  # synced although the broker never heard of it
        await broker.start()
        assert await s.coordinator.resend() == 1
        assert env.real() == [r.id]
        assert env.records.open() == []
    finally:
        await s.close()


async def test_restarted_sidecar_answers_checks_from_records_and_app(env: Env) -> None:
    first = await env.sidecar()
    broker = next(iter(env.cluster.brokers.values()))
    decided = await first.coordinator.begin(Message(TOPIC, b"d"))
    undecided = await first.coordinator.begin(Message(TOPIC, b"u"), transaction_key="order-9")
    unknown = await first.coordinator.begin(Message(TOPIC, b"n"))
    # the decision is synced but the process dies before END_TRANSACTION leaves it
    await env.records.put(env.records.get(decided.id).decided(Decision.COMMIT, env.clock.now_ms()))  # type: ignore[union-attr]
    await first.close()  # as after a SIGKILL: the broker forgets the client's connection

    second = await env.sidecar()
    try:
        await second.instance.heartbeat_to(broker.addr)
        env.app_answers[undecided.id] = TransactionState.ROLLBACK
        env.clock.wall_ms += 6_000
        futures = [env.watch(decided.receipt.queue_offset), env.watch(undecided.receipt.queue_offset)]
        assert broker.transactions.check_round() == 3
        kinds = await asyncio.wait_for(asyncio.gather(*futures), 5.0)
        assert kinds == [TRANSACTION_COMMIT_TYPE, TRANSACTION_ROLLBACK_TYPE]
        # the record answered for the decided one; the app for the others, told their transactionKey
        assert sorted(env.app_asked) == sorted([(undecided.id, "order-9"), (unknown.id, None)])
        assert env.records.get(undecided.id).decision is Decision.ROLLBACK  # type: ignore[union-attr]
        assert env.records.get(unknown.id).decision is Decision.NONE  # type: ignore[union-attr]
        assert env.real() == [decided.id]
    finally:
        await second.close()


@pytest.mark.parametrize("first", [Decision.COMMIT, Decision.ROLLBACK])
async def test_commit_and_rollback_at_once_one_is_refused(env: Env, first: Decision) -> None:
    """Both read the record undecided while the first one's synced write waited for the group commit:
    both answered 200 and both END_TRANSACTIONs were sent. Now one at a time per transaction."""
    kv = MemoryKV([CF])
    writer = GroupCommitWriter(kv)
    env.records = TransactionRecords(kv, writer)  # as in serve: a synced write awaits the group commit
    s = await env.sidecar()
    try:
        r = await s.coordinator.begin(Message(TOPIC, b"x"))
        other = Decision.ROLLBACK if first is Decision.COMMIT else Decision.COMMIT
        won, lost = await asyncio.gather(
            s.coordinator.decide(r.id, first), s.coordinator.decide(r.id, other), return_exceptions=True
        )
        assert isinstance(won, Record) and won.decision is first and won.acknowledged, won
        assert isinstance(lost, TransactionConflict), lost
        assert env.records.get(r.id) == won
        assert env.real() == ([r.id] if first is Decision.COMMIT else [])
        assert s.coordinator.stats.outcomes[DECIDED_OUTCOME[first]] == 1
        assert s.coordinator.stats.outcomes[DECIDED_OUTCOME[other]] == 0
        assert s.coordinator._turns == {}  # a transaction's lock goes once nobody decides it
    finally:
        await s.close()
        await writer.close()


@pytest.mark.parametrize("sent", [True, False], ids=["acknowledged", "synced-only"])
async def test_a_check_answered_after_the_apps_decision_does_not_overwrite_it(env: Env, sent: bool) -> None:
    """A broker checks an undecided transaction; while the app's check endpoint takes its time, the app
    commits. The endpoint's late ROLLBACK overwrote the commit in the record (and was what the broker
    was told); now the recorded decision wins. Sent and acknowledged, the broker acted on it already: it
    is answered UNKNOWN (COMMIT again would deliver the message twice). Synced but not acknowledged
    yet (END_TRANSACTION not out, or lost), the check's answer carries it to the broker."""
    s = await env.sidecar()
    broker = next(iter(env.cluster.brokers.values()))
    try:
        r = await s.coordinator.begin(Message(TOPIC, b"x"))
        assert r.receipt is not None
        env.app_answers[r.id] = TransactionState.ROLLBACK  # what the endpoint saw when it was asked
        env.app_held = asyncio.Event()
        answered: asyncio.Future[TransactionState] = asyncio.get_running_loop().create_future()
        check = s.tx.checker
        assert check is not None

        async def observed(request: CheckRequest) -> TransactionState:
            state = await check(request)
            answered.set_result(state)
            return state

        s.tx.checker = observed
        await s.instance.heartbeat_to(broker.addr)
        env.clock.wall_ms += 6_000
        assert broker.transactions.check_round() == 1
        await asyncio.wait_for(env.app_asking.wait(), 5)
        if sent:
            committed = await s.coordinator.decide(r.id, Decision.COMMIT)
            assert committed.acknowledged and env.real() == [r.id]
        else:  # the app's commit is synced; its END_TRANSACTION has not reached the broker
            committed = r.decided(Decision.COMMIT, env.clock.now_ms())
            await env.records.put(committed)
            delivered = env.watch(r.receipt.queue_offset)
        env.app_held.set()
        expected = TransactionState.UNKNOWN if sent else TransactionState.COMMIT
        assert await asyncio.wait_for(answered, 5) is expected
        assert env.records.get(r.id) == committed  # the endpoint's ROLLBACK is not recorded
        if sent:  # the app repeating its commit: the same answer, not 409
            assert await s.coordinator.decide(r.id, Decision.COMMIT) == committed
        else:
            assert await asyncio.wait_for(delivered, 5) == TRANSACTION_COMMIT_TYPE
            assert env.real() == [r.id]
        assert s.coordinator.stats.outcomes["checked_rollback"] == 0
        assert s.coordinator._turns == {}
    finally:
        await s.close()
