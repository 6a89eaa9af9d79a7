"""The push consumer in orderly mode on devbroker: one message at a time per queue, in order, only
while this client holds the broker's lock; SUSPEND retries the same message; locks renewed and released."""

from __future__ import annotations

import asyncio
import functools
from collections import defaultdict
from collections.abc import Callable, Sequence

from rocksidecar.devbroker import DevCluster
from rocksidecar.rmq.codes import RequestCode
from rocksidecar.rmq.consumer.config import ConsumeFrom, ConsumerConfig, ConsumeStatus
from rocksidecar.rmq.consumer.push_consumer import PushConsumer
from rocksidecar.rmq.message import MessageExt, MessageQueue
from rocksidecar.rmq.pool import RemotingClient
from rocksidecar.rmq.protocol.frame import RemotingCommand
from tests.rmq.consumer.helpers import WAIT_S, Recorder, owned, send_to_queues, settle, start, wired

TOPIC = "OrderT"
start_ = functools.partial(start, topic=TOPIC)
owned_ = functools.partial(owned, topic=TOPIC)


def config(group: str, name: str, **kw: object) -> ConsumerConfig:
    return ConsumerConfig(
        group,
        instance_name=name,
        client_ip="127.0.0.1",
        orderly=True,
        consume_from=ConsumeFrom.FIRST_OFFSET,
        suspend_orderly_s=0.01,
        **kw,  # type: ignore[arg-type]
    )


class OneAtATime(Recorder):
    """Records the order per queue and the most calls ever running at once on one queue."""

    def __init__(
        self, decide: Callable[[MessageExt], ConsumeStatus] = lambda m: ConsumeStatus.SUCCESS
    ) -> None:
        super().__init__(decide)
        self.running: dict[MessageQueue, int] = defaultdict(int)
        self.most = 0

    async def __call__(self, msgs: Sequence[MessageExt], mq: MessageQueue) -> ConsumeStatus:
        self.running[mq] += 1
        self.most = max(self.most, self.running[mq])
        try:
            await asyncio.sleep(0)  # give any other call for the same queue the chance to overlap
            return await super().__call__(msgs, mq)
        finally:
            self.running[mq] -= 1


def bodies_by_queue(got: list[MessageExt]) -> dict[tuple[str, int], list[bytes]]:
    out: dict[tuple[str, int], list[bytes]] = defaultdict(list)
    for m in got:
        broker, q, _ = m.body.decode().split("/")
        out[(broker, int(q))].append(m.body)
    return out


async def test_in_order_one_at_a_time_under_the_brokers_lock(
    cluster: DevCluster, consumers: list[PushConsumer]
) -> None:
    await send_to_queues(cluster, TOPIC, 10)
    rec = OneAtATime()
    consumer = await start_(consumers, cluster, config("GO-order", "one"), rec)
    await rec.until(lambda got: len(got) >= 80)
    assert rec.most == 1
    for (broker, q), bodies in bodies_by_queue(rec.got).items():
        assert bodies == [f"{broker}/{q}/{i}".encode() for i in range(10)]
    for mq in owned_(consumer):
        assert cluster.brokers[mq.broker_name].locks.owner("GO-order", mq) == consumer.client_id
    await consumer.close()
    for mq in [MessageQueue(TOPIC, b, q) for b in ("broker-a", "broker-b") for q in range(4)]:
        assert cluster.brokers[mq.broker_name].locks.owner("GO-order", mq) is None  # released on close


async def test_suspend_retries_the_same_message_before_the_next(
    cluster: DevCluster, consumers: list[PushConsumer]
) -> None:
    await send_to_queues(cluster, TOPIC, 5, queues=1)
    stuck = b"broker-a/0/2"
    rec = OneAtATime(
        lambda m: (
            ConsumeStatus.SUSPEND if m.body == stuck and m.reconsume_times < 2 else ConsumeStatus.SUCCESS
        )
    )
    await start_(consumers, cluster, config("GO-suspend", "one"), rec)
    await rec.until(lambda got: len(got) >= 12)
    seq = [(m.body, m.reconsume_times) for m in rec.got if m.body.startswith(b"broker-a")]
    assert seq == [
        (b"broker-a/0/0", 0),
        (b"broker-a/0/1", 0),
        (stuck, 0),
        (stuck, 1),
        (stuck, 2),
        (b"broker-a/0/3", 0),
        (b"broker-a/0/4", 0),
    ]


async def test_a_queue_locked_by_another_client_is_left_until_it_is_free(
    cluster: DevCluster, consumers: list[PushConsumer]
) -> None:
    await send_to_queues(cluster, TOPIC, 2, queues=1)
    mq = MessageQueue(TOPIC, "broker-a", 0)
    locks = cluster.brokers["broker-a"].locks
    assert locks.try_lock("GO-held", "10.9.9.9@stranger", [mq]) == [mq]
    rec = OneAtATime()
    consumer = await start_(consumers, cluster, config("GO-held", "one"), rec)
    assert mq not in owned_(consumer)  # no lock, no queue (Java: tried again next rebalance)
    await rec.until(lambda got: len(got) >= 2)  # broker-b's queue 0
    assert all(m.body.startswith(b"broker-b") for m in rec.got)
    locks.unlock("GO-held", "10.9.9.9@stranger", [mq])
    await consumer.rebalance()
    assert mq in owned_(consumer)
    await rec.until(lambda got: len(got) >= 4)


async def test_losing_the_lock_pauses_the_queue_and_renewal_resumes_it(
    cluster: DevCluster, consumers: list[PushConsumer]
) -> None:
    await send_to_queues(cluster, TOPIC, 1, queues=1)
    rec = OneAtATime()
    consumer = await start_(consumers, cluster, config("GO-renew", "one"), rec)
    await rec.until(lambda got: len(got) >= 2)
    mq = MessageQueue(TOPIC, "broker-a", 0)
    locks = cluster.brokers["broker-a"].locks
    state = consumer.queues[mq]
    locks.unlock("GO-renew", consumer.client_id, [mq])
    locks.try_lock("GO-renew", "10.9.9.9@thief", [mq])
    await consumer.lock_all()
    assert not state.pq.locked  # the renewal saw the lock gone: this queue waits
    assert not consumer._orderly.lock_valid(state)
    locks.unlock("GO-renew", "10.9.9.9@thief", [mq])
    await consumer.lock_all()
    assert state.pq.locked and consumer._orderly.lock_valid(state)
    await send_to_queues(cluster, TOPIC, 1, queues=1)
    await rec.until(lambda got: len(got) >= 4)


async def test_two_orderly_members_hold_disjoint_locks(
    cluster: DevCluster, consumers: list[PushConsumer]
) -> None:
    await send_to_queues(cluster, TOPIC, 1)
    a = await start_(consumers, cluster, config("GO-two", "a"), OneAtATime())
    b = await start_(consumers, cluster, config("GO-two", "b"), OneAtATime())
    await settle(a, lambda: len(owned_(a)) == 4)  # a released half on the notification
    await b.rebalance()  # b could not lock them while a held them; it takes them on its next round
    assert len(owned_(b)) == 4 and owned_(a).isdisjoint(owned_(b))
    for consumer in (a, b):
        for mq in owned_(consumer):
            assert cluster.brokers[mq.broker_name].locks.owner("GO-two", mq) == consumer.client_id


async def test_orderly_gives_up_after_max_reconsume_times_and_moves_on(
    cluster: DevCluster, consumers: list[PushConsumer]
) -> None:
    await send_to_queues(cluster, TOPIC, 3, queues=1)
    stuck = b"broker-a/0/1"
    rec = OneAtATime(lambda m: ConsumeStatus.SUSPEND if m.body == stuck else ConsumeStatus.SUCCESS)
    consumer = await start_(consumers, cluster, config("GO-max", "one", max_reconsume_times=2), rec)
    await rec.until(lambda got: sum(1 for m in got if m.body.startswith(b"broker-a")) >= 5)
    seq = [(m.body, m.reconsume_times) for m in rec.got if m.body.startswith(b"broker-a")]
    assert seq == [(b"broker-a/0/0", 0), (stuck, 0), (stuck, 1), (stuck, 2), (b"broker-a/0/2", 0)]
    assert consumer.stats["sent_back"] == 1
    assert [m.body for m in cluster.brokers["broker-a"].messages("%DLQ%GO-max")] == [stuck]
    assert cluster.brokers["broker-a"].messages("%RETRY%GO-max") == []


async def test_orderly_consumption_resumes_pulls_paused_by_flow_control(
    cluster: DevCluster, consumers: list[PushConsumer]
) -> None:
    await send_to_queues(cluster, TOPIC, 20, queues=1)
    rec = OneAtATime()
    cfg = config("GO-flow", "one", pull_threshold_for_queue=3, pull_batch_size=4)
    consumer = await start_(consumers, cluster, cfg, rec)
    await rec.until(lambda got: len(got) >= 40)  # far more than one cache-full per queue
    assert consumer.stats["flow_control_pauses"] >= 2


class HeldLock(RemotingClient):
    """The next LOCK_BATCH_MQ once ``hold`` is set waits for ``gate`` (a slow broker); ``entered`` says
    it is waiting."""

    def __init__(self) -> None:
        super().__init__()
        self.hold = False
        self.gate = asyncio.Event()
        self.entered = asyncio.Event()

    async def invoke(self, addr: str, cmd: RemotingCommand, timeout_s: float) -> RemotingCommand:
        if cmd.code == RequestCode.LOCK_BATCH_MQ and self.hold:
            self.hold = False
            self.entered.set()
            await self.gate.wait()
        return await super().invoke(addr, cmd, timeout_s)


async def test_a_lock_renewal_in_flight_does_not_unlock_a_queue_added_meanwhile() -> None:
    """lock_all renews the locks of the queues it listed and updates only those (Java's lockAll loops over
    the queues it asked for). A queue the rebalance added (and locked) while the renewal was in flight is
    not in the answer: it used to be marked unlocked, and its orderly loop waited for the next renewal
    (lock_interval_s, 20 s) before its first message."""
    topic, other = TOPIC + "Renew", TOPIC + "Renew2"
    async with DevCluster(brokers=1, queues=1) as cluster:
        await send_to_queues(cluster, topic, 1, queues=1)
        await send_to_queues(cluster, other, 1, queues=1)
        client = HeldLock()
        rec = OneAtATime()
        consumer = PushConsumer(config("GO-inflight", "one"), cluster.namesrv_addr, rec, client=client)
        wired(consumer, client)  # type: ignore[arg-type]
        consumer.subscribe(topic)
        try:
            await consumer.start()
            client.hold = True
            renewal = asyncio.create_task(consumer.lock_all())  # the 20 s renewal, now
            async with asyncio.timeout(WAIT_S):
                await client.entered.wait()  # its LOCK_BATCH_MQ is on its way
            consumer.subscribe(other)
            await consumer.refresh_routes()
            await consumer.rebalance()  # adds (and locks) the new topic's queue
            added = MessageQueue(other, "broker-a", 0)
            assert added in consumer.queues and consumer.queues[added].pq.locked
            client.gate.set()
            await renewal
            assert consumer.queues[added].pq.locked, (
                "the renewal that was in flight marked the queue added meanwhile as unlocked: it waits "
                f"{consumer.config.lock_interval_s} s for the next renewal"
            )
            await rec.until(lambda got: {m.topic for m in got} == {topic, other})
        finally:
            client.gate.set()
            await consumer.close()
            await client.close()
