"""An orderly queue taken away while its listener is busy or suspended: by an operator's reset (dropped and
added again) or by a rebalance. One listener call at a time per queue throughout, a reset arriving during
the removal holds, and the broker's lock is released as soon as no call runs."""

from __future__ import annotations

import asyncio
from collections.abc import Sequence

import pytest

from rocksidecar.devbroker import DevCluster
from rocksidecar.rmq.consumer import push_consumer as push_consumer_module
from rocksidecar.rmq.consumer.config import ConsumeStatus
from rocksidecar.rmq.consumer.offset_store import ReadType
from rocksidecar.rmq.consumer.push_consumer import PushConsumer
from rocksidecar.rmq.message import MessageExt, MessageQueue
from tests.rmq.consumer.helpers import WAIT_S, BlockingListener, orderly_config, send_to_queues

TOPIC = "OrderRemoveT"
MQ = MessageQueue(TOPIC, "broker-a", 0)


async def test_an_orderly_queue_readded_while_its_old_listener_call_runs_never_runs_two_calls_at_once(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Orderly mode promises one listener call at a time per queue (Java serialises every ConsumeRequest
    of a MessageQueue on messageQueueLock, whichever ProcessQueue it belongs to). An operator resets the
    queue while the listener is busy on offset 1: the queue is dropped, removed (the busy call outlives
    the unlock wait) and added again; the new process queue's first call (offset 0 again) waits for the
    old call on offset 1. The per-queue lock is freed once nothing holds or waits for it."""
    # the unlock wait's length is not the point
    monkeypatch.setattr(push_consumer_module, "ORDERLY_UNLOCK_WAIT_S", 0.05)
    async with DevCluster(brokers=1, queues=1) as cluster:
        await send_to_queues(cluster, TOPIC, 3, queues=1)
        listener = BlockingListener(block_at=1)
        consumer = PushConsumer(
            orderly_config("GOR-readd", offset_illegal_wait_s=0.01), cluster.namesrv_addr, listener
        )
        consumer.subscribe(TOPIC)
        try:
            await consumer.start()
            async with asyncio.timeout(WAIT_S):
                await listener.blocked.wait()  # offset 0 done; the call on offset 1 is running
            pulled = consumer.stats["pulled"]
            cluster.brokers["broker-a"].offsets.commit("GOR-readd", TOPIC, 0, 0)  # the broker resets first
            assert consumer.reset_offsets(TOPIC, {MQ: 0}) == [MQ]

            async def release_once_readded() -> None:
                # the re-added queue's first pull is cached: its loop now waits for the old call, so
                # let the old call finish
                await consumer.stats.reach("pulled", pulled + 1)
                listener.release.set()

            releaser = asyncio.create_task(release_once_readded())
            await listener.until(lambda: listener.offsets.count(0) >= 2 and listener.offsets.count(2) >= 1)
            await releaser
            assert listener.most == 1, (
                f"{listener.most} listener calls ran at once on one orderly queue "
                f"(calls on offsets {listener.offsets})"
            )
        finally:
            listener.release.set()
            await consumer.close()
        assert len(consumer._orderly.queue_locks) == 0  # no entry outlives its queue's loops


async def test_a_reset_arriving_while_an_orderly_queue_is_being_removed_is_not_overwritten(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The rebalance removes a queue whose orderly listener is busy: the removal waits up to
    ORDERLY_UNLOCK_WAIT_S for the call, then persists the offset in memory. An operator's reset (the
    broker resets its offset, then tells the member) arriving in that wait still finds the queue (it stays
    listed, dropped, until its removal is over, as Java's processQueueTable keeps it), so what the removal
    persists is the reset's offset, not the old one (with which the next owner went on from 2 and skipped
    what the reset was to redeliver)."""
    monkeypatch.setattr(push_consumer_module, "ORDERLY_UNLOCK_WAIT_S", 0.05)
    async with DevCluster(brokers=1, queues=1) as cluster:
        broker = cluster.brokers["broker-a"]
        await send_to_queues(cluster, TOPIC, 3, queues=1)
        listener = BlockingListener(block_at=2)
        consumer = PushConsumer(orderly_config("GOR-reset"), cluster.namesrv_addr, listener)
        consumer.subscribe(TOPIC)
        real_persist = consumer.offsets.persist
        reset: list[list[MessageQueue]] = []
        armed = False

        async def persist(q: MessageQueue) -> None:
            # The removal's persist comes right after its wait for the busy listener: the operator's reset
            # arrived during that wait (the broker resets first, then notifies the member).
            if q == MQ and armed and not reset:
                broker.offsets.commit("GOR-reset", TOPIC, 0, 0)
                reset.append(consumer.reset_offsets(TOPIC, {MQ: 0}))
            await real_persist(q)

        monkeypatch.setattr(consumer.offsets, "persist", persist)
        try:
            await consumer.start()
            async with asyncio.timeout(WAIT_S):
                await listener.blocked.wait()  # 0 and 1 consumed, 2 running
            assert await consumer.offsets.read(MQ, ReadType.MEMORY) == 2
            removed = consumer.stats["queues_removed"]
            armed = True  # the next persist of the queue is the removal's (the 5 s timer is far off)
            consumer.unsubscribe(TOPIC)  # the rebalance removes the queue
            async with asyncio.timeout(WAIT_S):
                await consumer.stats.reach("queues_removed", removed + 1)
            assert reset == [[MQ]], f"the reset during the removal applied to {reset}"
            assert broker.offsets.query("GOR-reset", TOPIC, 0) == 0, (
                f"the operator reset the queue to 0 during its removal; the broker now holds "
                f"{broker.offsets.query('GOR-reset', TOPIC, 0)}"
            )
            assert MQ not in consumer.queues
        finally:
            listener.release.set()
            await consumer.close()


async def test_an_orderly_queue_removed_during_a_suspend_is_unlocked_for_its_next_owner() -> None:
    """The listener answered SUSPEND: the orderly loop waits suspend_orderly_s before trying the message
    again, holding no listener call. The rebalance then removes the queue: it unlocks at once (Java's
    removeUnnecessaryMessageQueue only waits for the consume lock, which a suspended queue does not
    hold), where it used to count the sleeping loop as busy, give up after ORDERLY_UNLOCK_WAIT_S and leave
    the broker's lock to lapse (60 s) before the next owner could consume. The drop ends the suspend wait,
    so the loop does not linger either."""
    async with DevCluster(brokers=1, queues=1) as cluster:
        broker = cluster.brokers["broker-a"]
        await send_to_queues(cluster, TOPIC, 2, queues=1)
        answered: list[int] = []

        async def listener(msgs: Sequence[MessageExt], q: MessageQueue) -> ConsumeStatus:
            answered.append(msgs[0].queue_offset)
            return ConsumeStatus.SUSPEND if len(answered) == 1 else ConsumeStatus.SUCCESS

        consumer = PushConsumer(
            orderly_config("GOR-suspend", suspend_orderly_s=30.0), cluster.namesrv_addr, listener
        )
        consumer.subscribe(TOPIC)
        try:
            await consumer.start()
            async with asyncio.timeout(WAIT_S):
                await consumer.stats.reach("consume_failed", 1)  # the loop now waits out its suspend
            assert broker.locks.owner("GOR-suspend", MQ) == consumer.client_id
            loops = set(consumer.queues[MQ].tasks)
            consumer.unsubscribe(TOPIC)  # the rebalance removes the queue (as when another member joins)
            async with asyncio.timeout(WAIT_S):
                await consumer.stats.reach("queues_removed", 1)
            assert answered == [0], "no listener call was running during the removal"
            assert broker.locks.owner("GOR-suspend", MQ) is None, (
                "the removed queue is still locked to this member: its next owner waits for the lock to lapse"
            )
            async with asyncio.timeout(WAIT_S):
                await asyncio.wait(loops)  # the suspended loop saw the drop (not after 30 s)
            assert answered == [0]
        finally:
            await consumer.close()
