"""An orderly queue rebalanced away while its listener call outlasts the removal's ORDERLY_UNLOCK_WAIT_S:
as Java's RebalanceImpl keeps such a process queue and lockAll renews its broker lock, this member keeps
the queue's broker lock renewed until the call ends (another member cannot start on the next message
meanwhile), delivers nothing more of it, then unlocks it, unless the queue came back to this member."""

from __future__ import annotations

import asyncio

import pytest

from rocksidecar.devbroker import DevCluster
from rocksidecar.rmq.consumer import push_consumer as push_consumer_module
from rocksidecar.rmq.consumer.push_consumer import PushConsumer
from rocksidecar.rmq.message import MessageQueue
from tests.rmq.consumer.helpers import WAIT_S, BlockingListener, orderly_config, send_to_queues

TOPIC = "OrderKeepLockT"
MQ = MessageQueue(TOPIC, "broker-a", 0)
LAPSE_S = 60.0  # the broker's lock lapses this long after its last renewal (REBALANCE_LOCK_MAX_LIVE_TIME)


class BrokerClock:
    """The devbroker's clock (lock renewals and lapses), moved by the test only."""

    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


async def _removed_while_busy(
    consumer: PushConsumer, listener: BlockingListener, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Start, let the call on offset 1 block, and have the rebalance remove the queue meanwhile."""
    monkeypatch.setattr(push_consumer_module, "ORDERLY_UNLOCK_WAIT_S", 0.05)  # its length is not the point
    consumer.subscribe(TOPIC)
    await consumer.start()
    async with asyncio.timeout(WAIT_S):
        await listener.blocked.wait()  # offset 0 consumed, the call on offset 1 runs
    consumer.unsubscribe(TOPIC)  # the rebalance removes the queue (as when another member takes it)
    async with asyncio.timeout(WAIT_S):
        await consumer.stats.reach("queues_removed", 1)  # the unlock wait gave up: the call is still busy


async def test_a_busy_orderly_queue_rebalanced_away_keeps_its_lock_until_its_call_ends(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The removal gives up waiting for the busy call; the member still renews the queue's broker lock on
    every lock round, so past the broker's 60 s lapse another member cannot lock the queue and consume
    offset 2 while this member's call on 1 runs. Nothing more of the queue reaches the listener; once the
    call ends the lock is released at once (the next owner need not wait out the lapse) and no later
    round renews it (it used to stop renewing at the removal: the lock lapsed under the running call)."""
    clock = BrokerClock()
    async with DevCluster(brokers=1, queues=1, clock=clock) as cluster:
        broker = cluster.brokers["broker-a"]
        await send_to_queues(cluster, TOPIC, 3, queues=1)
        listener = BlockingListener(block_at=1)
        consumer = PushConsumer(orderly_config("GOK-keep"), cluster.namesrv_addr, listener)
        try:
            await _removed_while_busy(consumer, listener, monkeypatch)
            assert MQ not in consumer.queues
            for _ in range(3):  # lock rounds (every lock_interval_s, 20 s) while the call runs
                clock.now += LAPSE_S * 2 / 3
                await consumer.lock_all()
                assert broker.locks.owner("GOK-keep", MQ) == consumer.client_id, (
                    "the broker's lock of a queue whose listener call still runs was not renewed"
                )
            clock.now += LAPSE_S * 2 / 3  # past the last renewal by less than the lapse
            assert broker.locks.try_lock("GOK-keep", "another-member", [MQ]) == [], (
                "another member locked the queue while this member's listener call on it still ran"
            )
            assert listener.offsets == [0, 1], "messages of a removed queue reached the listener"
            done = consumer.stats["orderly_deferred_unlocks_done"]
            listener.release.set()
            async with asyncio.timeout(WAIT_S):
                await consumer.stats.reach("orderly_deferred_unlocks_done", done + 1)
            assert broker.locks.owner("GOK-keep", MQ) is None, "the queue stayed locked after its call"
            await consumer.lock_all()
            assert broker.locks.owner("GOK-keep", MQ) is None, "a lock round locked the removed queue again"
            assert listener.offsets == [0, 1]
        finally:
            listener.release.set()
            await consumer.close()


async def test_a_busy_orderly_queue_given_back_before_its_call_ends_stays_locked_and_goes_on(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The queue comes back to this member while the removed call still runs: the rebalance adds it again
    (its first call waits for the old one). When the old call ends the lock now belongs to the re-added
    queue and is kept; consumption goes on from the persisted offset, one call at a time."""
    clock = BrokerClock()
    async with DevCluster(brokers=1, queues=1, clock=clock) as cluster:
        broker = cluster.brokers["broker-a"]
        await send_to_queues(cluster, TOPIC, 3, queues=1)
        listener = BlockingListener(block_at=1)
        consumer = PushConsumer(orderly_config("GOK-back"), cluster.namesrv_addr, listener)
        try:
            await _removed_while_busy(consumer, listener, monkeypatch)
            added = consumer.stats[f"queues_added:{TOPIC}"]
            consumer.subscribe(TOPIC)
            async with asyncio.timeout(WAIT_S):
                await consumer.stats.reach(f"queues_added:{TOPIC}", added + 1)
            done = consumer.stats["orderly_deferred_unlocks_done"]
            listener.release.set()
            await listener.until(lambda: 2 in listener.offsets)
            async with asyncio.timeout(WAIT_S):
                await consumer.stats.reach("orderly_deferred_unlocks_done", done + 1)
            assert broker.locks.owner("GOK-back", MQ) == consumer.client_id, (
                "the end of the removed call unlocked the queue this member consumes again"
            )
            assert listener.offsets == [0, 1, 1, 2]  # 1 again: its removed call's result was ignored
            assert listener.most == 1
        finally:
            listener.release.set()
            await consumer.close()


async def test_close_releases_the_lock_of_a_removed_queue_whose_call_outlasts_it(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """close() waits close_timeout_s for running calls, then releases the orderly locks: that of a queue
    removed while busy too (left to lapse, its next owner waited 60 s)."""
    async with DevCluster(brokers=1, queues=1) as cluster:
        broker = cluster.brokers["broker-a"]
        await send_to_queues(cluster, TOPIC, 3, queues=1)
        listener = BlockingListener(block_at=1)
        consumer = PushConsumer(
            orderly_config("GOK-close", close_timeout_s=0.05), cluster.namesrv_addr, listener
        )
        try:
            await _removed_while_busy(consumer, listener, monkeypatch)
            assert broker.locks.owner("GOK-close", MQ) == consumer.client_id
            await consumer.close()
            assert broker.locks.owner("GOK-close", MQ) is None, "close() left the removed queue locked"
        finally:
            listener.release.set()
            await consumer.close()
