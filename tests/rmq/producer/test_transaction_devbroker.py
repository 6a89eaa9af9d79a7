"""TransactionProducer against devbroker's transactions (issue 29): halves stay out of the real queues,
END_TRANSACTION commits or rolls back on the broker that holds the half, a broker's check-back is
answered with the checker's decision, and the broker's checks follow its clock and its check limit."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from dataclasses import dataclass, field

import pytest

from rocksidecar.devbroker import DevCluster
from rocksidecar.devbroker.transactions import HALF_TOPIC, OP_TOPIC
from rocksidecar.rmq import ClientInstance, Message
from rocksidecar.rmq.broker import TRANSACTION_COMMIT_TYPE, TRANSACTION_ROLLBACK_TYPE
from rocksidecar.rmq.errors import BrokerError
from rocksidecar.rmq.producer import Producer, ProducerConfig
from rocksidecar.rmq.producer.transaction import (
    CheckRequest,
    HalfReceipt,
    TransactionProducer,
    TransactionState,
    commit_log_offset,
)
from tests.fakes import FakeWallClock

GROUP = "tx_pg"
TOPIC = "TxTopic"


@dataclass
class Env:
    cluster: DevCluster
    clock: FakeWallClock
    instance: ClientInstance
    tx: TransactionProducer
    answers: dict[str, TransactionState] = field(default_factory=dict)
    asked: list[CheckRequest] = field(default_factory=list)
    decided: dict[int, asyncio.Future[int]] = field(default_factory=dict)

    def real_messages(self) -> list[str | None]:
        return sorted((m.uniq_key for b in self.cluster.brokers.values() for m in b.messages(TOPIC)), key=str)

    def watch(self, receipt: HalfReceipt) -> asyncio.Future[int]:
        fut = self.decided[receipt.queue_offset] = asyncio.get_running_loop().create_future()
        return fut


@pytest.fixture
async def env() -> AsyncIterator[Env]:
    clock = FakeWallClock()
    async with DevCluster(
        brokers=2, queues=4, now_ms=clock.now_ms, transaction_check_interval_s=0
    ) as cluster:
        instance = ClientInstance(cluster.namesrv_addr)
        producer = Producer(instance.namesrv, instance.api, ProducerConfig(group=GROUP), instance=instance)
        env = Env(cluster, clock, instance, None)  # type: ignore[arg-type]

        async def checker(req: CheckRequest) -> TransactionState:
            env.asked.append(req)
            return env.answers.get(req.msg_id, TransactionState.UNKNOWN)

        env.tx = TransactionProducer(producer, GROUP + "_tx", checker)
        for broker in cluster.brokers.values():

            def on_decided(offset: int, kind: int, name: str = broker.name) -> None:
                for receipt_offset, fut in env.decided.items():
                    if receipt_offset == offset and not fut.done():
                        fut.set_result(kind)

            broker.transactions.on_decided = on_decided
        await producer.start()
        env.tx.start()
        try:
            yield env
        finally:
            await env.tx.close()
            await producer.close()
            await instance.close()


async def test_half_is_invisible_until_commit_and_rollback_drops_it(env: Env) -> None:
    a = await env.tx.send_half(Message(TOPIC, b"a", tags="T"), sharding_key="k")
    b = await env.tx.send_half(Message(TOPIC, b"b"), sharding_key="k")
    assert a.broker_name == b.broker_name
    assert env.real_messages() == []
    half = env.cluster.brokers[a.broker_name].messages(HALF_TOPIC)
    assert [m.properties["REAL_TOPIC"] for m in half] == [TOPIC, TOPIC]
    assert {m.properties["PGROUP"] for m in half} == {GROUP + "_tx"}
    assert [m.queue_offset for m in half] == [a.queue_offset, b.queue_offset]
    assert a.commit_log_offset == commit_log_offset(a.offset_msg_id) == half[0].commit_log_offset

    await env.tx.end(a, TransactionState.COMMIT)
    await env.tx.end(b, TransactionState.ROLLBACK)
    stored = env.cluster.brokers[a.broker_name].messages(TOPIC)
    assert [(m.uniq_key, m.body, m.tags, m.queue_id) for m in stored] == [
        (a.msg_id, b"a", "T", a.queue.queue_id)
    ]
    assert "TRAN_MSG" not in stored[0].properties and "REAL_TOPIC" not in stored[0].properties
    ops = env.cluster.brokers[a.broker_name].messages(OP_TOPIC)
    assert sorted(int(m.body) for m in ops) == [a.queue_offset, b.queue_offset]
    assert env.cluster.brokers[a.broker_name].transactions.undecided() == 0


async def test_end_with_wrong_group_or_offset_is_refused(env: Env) -> None:
    r = await env.tx.send_half(Message(TOPIC, b"x"))
    addr = env.tx.broker_addr(r)
    wrong_group = HalfReceipt(
        "other", r.msg_id, r.broker_name, r.queue, r.queue_offset, r.commit_log_offset, r.offset_msg_id
    )
    with pytest.raises(BrokerError, match="producer group wrong"):
        await env.instance.api.end_transaction(addr, wrong_group.end(TransactionState.COMMIT))
    wrong_offset = HalfReceipt(
        r.group, r.msg_id, r.broker_name, r.queue, r.queue_offset + 5, r.commit_log_offset, r.offset_msg_id
    )
    with pytest.raises(BrokerError, match="state table offset wrong"):
        await env.instance.api.end_transaction(addr, wrong_offset.end(TransactionState.COMMIT))
    nowhere = HalfReceipt(
        r.group, r.msg_id, r.broker_name, r.queue, r.queue_offset, r.commit_log_offset + 3, r.offset_msg_id
    )
    with pytest.raises(BrokerError, match="prepared transaction message failed"):
        await env.instance.api.end_transaction(addr, nowhere.end(TransactionState.COMMIT))
    assert env.real_messages() == []


async def test_check_back_asks_only_old_halves_and_the_answer_decides(env: Env) -> None:
    commit = await env.tx.send_half(Message(TOPIC, b"c"), sharding_key="s")
    rollback = await env.tx.send_half(Message(TOPIC, b"r"), sharding_key="s")
    unknown = await env.tx.send_half(Message(TOPIC, b"u"), sharding_key="s")
    broker = env.cluster.brokers[commit.broker_name]
    await env.instance.heartbeat()  # announces the group, as the periodic heartbeat would
    assert broker.transactions.check_round() == 0  # younger than transactionTimeOut: not asked yet
    env.answers = {commit.msg_id: TransactionState.COMMIT, rollback.msg_id: TransactionState.ROLLBACK}
    env.clock.wall_ms += 6_000
    decisions = [env.watch(commit), env.watch(rollback)]
    assert broker.transactions.check_round() == 3
    assert await asyncio.wait_for(asyncio.gather(*decisions), 5.0) == [
        TRANSACTION_COMMIT_TYPE,
        TRANSACTION_ROLLBACK_TYPE,
    ]
    assert env.real_messages() == [commit.msg_id]
    assert {r.msg_id for r in env.asked} == {commit.msg_id, rollback.msg_id, unknown.msg_id}
    asked = next(r for r in env.asked if r.msg_id == commit.msg_id)
    assert asked.message.topic == TOPIC and asked.message.body == b"c"
    assert asked.tran_state_table_offset == commit.queue_offset
    assert broker.transactions.undecided() == 1  # UNKNOWN: asked again next round

    env.answers[unknown.msg_id] = TransactionState.COMMIT
    late = env.watch(unknown)
    assert broker.transactions.check_round() == 1
    assert await asyncio.wait_for(late, 5.0) == TRANSACTION_COMMIT_TYPE
    assert env.real_messages() == sorted([commit.msg_id, unknown.msg_id])


async def test_undecided_half_is_dropped_after_the_check_limit(env: Env) -> None:
    r = await env.tx.send_half(Message(TOPIC, b"x"))
    broker = env.cluster.brokers[r.broker_name]
    broker.transactions.max_checks = 2
    await env.instance.heartbeat()
    env.clock.wall_ms += 6_000
    assert [broker.transactions.check_round() for _ in range(3)] == [1, 1, 0]
    assert broker.transactions.undecided() == 0
    assert env.real_messages() == []


async def test_no_producer_of_the_group_online_means_no_check(env: Env) -> None:
    r = await env.tx.send_half(Message(TOPIC, b"x"))
    broker = env.cluster.brokers[r.broker_name]
    env.clock.wall_ms += 6_000  # no heartbeat has named the group yet
    assert broker.transactions.check_round() == 0
    assert broker.transactions.undecided() == 1
