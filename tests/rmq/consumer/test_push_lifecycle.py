"""The push consumer's edges: what it tells the broker in heartbeats, subscription changes, consume-from
a timestamp, an illegal offset, a broker restart, and a dropped queue's late results."""

from __future__ import annotations

import asyncio
import functools
import time
from collections.abc import Sequence
from pathlib import Path

import pytest

from rocksidecar.devbroker import DevCluster
from rocksidecar.rmq.codes import RequestCode
from rocksidecar.rmq.consumer.config import ConsumeFrom, ConsumerConfig, ConsumeStatus, MessageModel
from rocksidecar.rmq.consumer.consume_concurrently import ConcurrentService
from rocksidecar.rmq.consumer.offset_store import ReadType
from rocksidecar.rmq.consumer.process_queue import ProcessQueue
from rocksidecar.rmq.consumer.push_consumer import PushConsumer
from rocksidecar.rmq.consumer.queue_state import QueueState
from rocksidecar.rmq.consumer.rebalance import start_offset
from rocksidecar.rmq.consumer.stats import Stats
from rocksidecar.rmq.consumer.topic_stats import TopicStats
from rocksidecar.rmq.message import MessageExt, MessageQueue
from tests.rmq.consumer.factory import stored
from tests.rmq.consumer.helpers import (
    FailingClient,
    Recorder,
    owned,
    send_to_queues,
    settle,
    start,
    wired,
)

TOPIC = "LifeT"
start_ = functools.partial(start, topic=TOPIC)


def config(group: str, **kw: object) -> ConsumerConfig:
    kw.setdefault("consume_from", ConsumeFrom.FIRST_OFFSET)
    return ConsumerConfig(group, instance_name="one", client_ip="127.0.0.1", **kw)  # type: ignore[arg-type]


async def test_the_heartbeat_registers_subscriptions_and_the_retry_topic(
    cluster: DevCluster, consumers: list[PushConsumer]
) -> None:
    await send_to_queues(cluster, TOPIC, 1, queues=1)
    consumer = await start_(consumers, cluster, config("GL-hb"), Recorder(), "TagA || TagB")
    clients = cluster.brokers["broker-a"].clients
    assert clients.consumer_ids("GL-hb") == [consumer.client_id]
    sub = clients.subscription("GL-hb", TOPIC)
    assert sub is not None and sub.expression == "TagA || TagB" and sub.codes is not None
    assert clients.subscription("GL-hb", "%RETRY%GL-hb") is not None
    data = consumer.consumer_data().to_json()
    assert (data["consumeType"], data["messageModel"], data["consumeFromWhere"]) == (
        "CONSUME_PASSIVELY",
        "CLUSTERING",
        "CONSUME_FROM_FIRST_OFFSET",
    )
    assert "%RETRY%GL-hb" in cluster.brokers["broker-a"].topics.names()


async def test_subscribing_after_start_adds_the_topics_queues_and_unsubscribing_drops_them(
    cluster: DevCluster, consumers: list[PushConsumer]
) -> None:
    await send_to_queues(cluster, TOPIC, 1, queues=1)
    await send_to_queues(cluster, "LifeOther", 1, queues=1)
    rec = Recorder()
    consumer = await start_(consumers, cluster, config("GL-subs"), rec)
    consumer.subscribe("LifeOther")
    await consumer.refresh_routes()
    await consumer.rebalance()
    assert len(owned(consumer, topic="LifeOther")) == 8
    await rec.until(lambda got: {m.topic for m in got} == {TOPIC, "LifeOther"})
    consumer.unsubscribe("LifeOther")
    await consumer.rebalance()
    assert owned(consumer, topic="LifeOther") == set()
    assert len(owned(consumer, topic=TOPIC)) == 8
    with pytest.raises(ValueError):
        consumer.subscribe("%RETRY%GL-subs")


async def test_a_new_group_on_a_queue_still_starting_at_0_consumes_from_0_whatever_consume_from_says() -> (
    None
):
    # Java 4.9.4's broker answers QUERY_CONSUMER_OFFSET with 0 (not "not found") for a group it has no
    # offset of while the queue's first message is still stored, and the client then starts at 0:
    # consume-from only applies when the broker has no answer. devbroker does the same.
    now = [1_000_000]
    async with DevCluster(brokers=1, queues=1, now_ms=lambda: now[0]) as cluster:
        await send_to_queues(cluster, TOPIC, 2, queues=1)
        now[0] += 60_000
        rec = Recorder()
        cfg = config("GL-ts", consume_from=ConsumeFrom.TIMESTAMP, consume_timestamp_ms=now[0])
        consumer = PushConsumer(cfg, cluster.namesrv_addr, rec)
        consumer.subscribe(TOPIC)
        await consumer.start()
        try:
            await rec.until(lambda got: len(got) >= 2)
            assert [m.queue_offset for m in rec.got] == [0, 1]
        finally:
            await consumer.close()


class FakeBroker:
    async def get_max_offset(self, addr: str, mq: MessageQueue) -> int:
        return 40

    async def search_offset(self, addr: str, mq: MessageQueue, timestamp_ms: int) -> int:
        return timestamp_ms // 1000


class FakeOffsets:
    def __init__(self, committed: int | None) -> None:
        self.committed = committed

    async def read(self, mq: MessageQueue, read_type: ReadType) -> int | None:
        assert read_type is ReadType.STORE
        return self.committed


@pytest.mark.parametrize(
    ("consume_from", "topic", "committed", "expected"),
    [
        (ConsumeFrom.LAST_OFFSET, "T", 7, 7),  # a committed offset always wins
        (ConsumeFrom.LAST_OFFSET, "T", None, 40),
        (ConsumeFrom.LAST_OFFSET, "%RETRY%G", None, 0),
        (ConsumeFrom.FIRST_OFFSET, "T", None, 0),
        (ConsumeFrom.TIMESTAMP, "T", None, 12),
        (ConsumeFrom.TIMESTAMP, "%RETRY%G", None, 40),
    ],
)
async def test_start_offset_follows_compute_pull_from_where(
    consume_from: ConsumeFrom, topic: str, committed: int | None, expected: int
) -> None:
    cfg = ConsumerConfig("G", consume_from=consume_from, consume_timestamp_ms=12_345)
    mq = MessageQueue(topic, "b", 0)
    got = await start_offset(cfg, FakeOffsets(committed), FakeBroker(), "addr", mq)  # type: ignore[arg-type]
    assert got == expected


async def test_an_illegal_offset_is_corrected_from_the_brokers_answer(
    cluster: DevCluster, consumers: list[PushConsumer]
) -> None:
    await send_to_queues(cluster, TOPIC, 2, queues=1)
    for broker in cluster.brokers.values():
        broker.offsets.commit("GL-moved", TOPIC, 0, 500)  # far past the end of the queue
    rec = Recorder()
    consumer = await start_(consumers, cluster, config("GL-moved"), rec)
    mq = MessageQueue(TOPIC, "broker-a", 0)
    # The pull removed the queue with the corrected offset; a rebalance adds it again from there.
    await settle(consumer, lambda: mq in consumer.queues and consumer.queues[mq].pq.next_offset == 2)
    await send_to_queues(cluster, TOPIC, 1, queues=1)
    await rec.until(lambda got: len(got) >= 2)
    assert sorted(m.queue_offset for m in rec.got) == [2, 2]


async def test_a_broadcasting_consumer_on_expired_queues_moves_each_once_and_reads_what_follows(
    cluster: DevCluster, consumers: list[PushConsumer], tmp_path: Path
) -> None:
    """Every queue's messages expired (retention) before a broadcasting consumer starts with no offsets:
    each queue's first pull is moved to the queue's start once, and what is sent next is read. Before,
    moving one queue wrote the offsets file without the others moved just before, so they started from
    0 again and were moved again, round after round (a Rock-DMQ replica on an empty volume)."""
    await send_to_queues(cluster, TOPIC, 2)
    for broker in cluster.brokers.values():
        for q in range(4):
            broker.store.expire(TOPIC, q, 2)
    rec = Recorder()
    cfg = config("GL-expired", message_model=MessageModel.BROADCASTING, offsets_dir=tmp_path)
    consumer = await start_(consumers, cluster, cfg, rec)
    queues = 4 * len(cluster.brokers)
    await settle(consumer, lambda: len(consumer.queues) == queues and all(
        s.pq.next_offset == 2 for s in consumer.queues.values()))  # fmt: skip
    await send_to_queues(cluster, TOPIC, 1)
    await rec.until(lambda got: len(got) >= queues)
    assert sorted(m.queue_offset for m in rec.got) == [2] * queues
    assert consumer.stats["offsets_moved"] == queues


async def test_pulling_resumes_after_a_broker_restart(
    cluster: DevCluster, consumers: list[PushConsumer]
) -> None:
    rec = Recorder()
    await send_to_queues(cluster, TOPIC, 1, queues=1)
    consumer = await start_(consumers, cluster, config("GL-restart", pull_delay_on_error_s=0.05), rec)
    await rec.until(lambda got: len(got) >= 2)
    broker = cluster.brokers["broker-b"]
    await broker.stop()
    await consumer.stats.reach("pull_errors", consumer.stats["pull_errors"] + 2)
    await broker.start()
    await send_to_queues(cluster, TOPIC, 1, queues=1)
    await rec.until(lambda got: len(got) >= 4)
    assert sum(1 for m in rec.got if m.body.startswith(b"broker-b")) == 2


async def test_a_failed_consumer_list_keeps_the_allocation(
    cluster: DevCluster, consumers: list[PushConsumer]
) -> None:
    await send_to_queues(cluster, TOPIC, 1, queues=1)
    client = FailingClient()
    consumer = wired(PushConsumer(config("GL-keep"), cluster.namesrv_addr, Recorder(), client=client), client)
    consumer.subscribe(TOPIC)
    consumers.append(consumer)
    await consumer.start()
    before = owned(consumer, topic=TOPIC)
    assert len(before) == 8
    client.fail[RequestCode.GET_CONSUMER_LIST_BY_GROUP] = 4  # both brokers, both topics
    await consumer.rebalance()
    assert owned(consumer, topic=TOPIC) == before  # Java skips the topic rather than dropping it


async def test_the_timers_rebalance_and_persist_without_being_asked(
    cluster: DevCluster, consumers: list[PushConsumer]
) -> None:
    await send_to_queues(cluster, TOPIC, 3, queues=1)
    rec = Recorder()
    cfg = config("GL-timers", rebalance_interval_s=0.02, persist_interval_s=0.02)
    consumer = await start_(consumers, cluster, cfg, rec)
    await rec.until(lambda got: len(got) >= 6)
    # Start's rebalance and one per notification (our own join, from each broker), then the timer's.
    await consumer.stats.reach("rebalances_done", consumer.stats["notified"] + 4)
    await consumer.stats.reach("persists", consumer.stats["persists"] + 2)  # one full round after the 6
    assert [b.offsets.query("GL-timers", TOPIC, 0) for b in cluster.brokers.values()] == [3, 3]


class FakeHost:
    """Just enough of a push consumer for the concurrent service."""

    def __init__(self, listener: Recorder) -> None:
        self.config = ConsumerConfig("G")
        self.listener = listener
        self.offsets = self
        self.stats = Stats()
        self.topic_stats = TopicStats(time.monotonic)
        self.closing = False
        self.updates: list[tuple[MessageQueue, int]] = []
        self.tasks: list[asyncio.Task[None]] = []

    count_consumed = PushConsumer.count_consumed  # the consumer's own counting, on this host's stats

    def update(self, mq: MessageQueue, offset: int, *, increase_only: bool) -> None:
        self.updates.append((mq, offset))

    def spawn(self, state: QueueState, coro: object) -> None:
        self.tasks.append(asyncio.get_running_loop().create_task(coro))  # type: ignore[arg-type]

    async def send_back(self, msg: MessageExt, mq: MessageQueue, *, dead: bool = False) -> bool:
        return True

    async def wait_closing(self, timeout_s: float) -> bool:
        return True

    def advanced(self, state: QueueState, committed: int) -> None:
        pass  # no commit window here


async def test_a_dropped_queues_late_results_never_move_the_offset() -> None:
    release, both_in = asyncio.Event(), asyncio.Event()
    entered = 0

    class Blocked(Recorder):
        async def __call__(self, msgs: Sequence[MessageExt], mq: MessageQueue) -> ConsumeStatus:
            nonlocal entered
            entered += 1
            if entered == 2:
                both_in.set()
            await release.wait()
            return await super().__call__(msgs, mq)

    host = FakeHost(Blocked())
    service = ConcurrentService(host)  # type: ignore[arg-type]
    state = QueueState(MessageQueue("T", "b", 0), ProcessQueue(0))
    state.pq.put([stored(0), stored(1)], 2)
    service.submit(state, state.pq.messages())
    await both_in.wait()  # both calls are in the listener
    state.pq.drop()  # rebalanced away meanwhile
    release.set()
    await service.drain(5.0)  # the pool's workers finished both calls
    await service.stop()
    assert len(host.listener.got) == 2
    assert host.updates == []  # the new owner starts from the last persisted offset instead
    host2 = FakeHost(Recorder())
    state2 = QueueState(MessageQueue("T", "b", 1), ProcessQueue(0))
    state2.pq.put([stored(0)], 1)
    service2 = ConcurrentService(host2)  # type: ignore[arg-type]
    service2.submit(state2, state2.pq.messages())
    await service2.drain(5.0)
    await service2.stop()
    assert host2.updates == [(state2.mq, 1)]


async def test_async_with_starts_the_consumer_and_leaves_the_group_on_exit(cluster: DevCluster) -> None:
    await send_to_queues(cluster, TOPIC, 1, queues=1)
    consumer = PushConsumer(config("GL-with"), cluster.namesrv_addr, Recorder())
    consumer.subscribe(TOPIC)
    clients = cluster.brokers["broker-a"].clients
    async with consumer as running:
        assert running is consumer and consumer.started
        assert clients.consumer_ids("GL-with") == [consumer.client_id]
    assert clients.consumer_ids("GL-with") == []  # close() unregistered: the group rebalances at once
