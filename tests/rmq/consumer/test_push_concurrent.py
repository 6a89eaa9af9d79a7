"""The push consumer in concurrent mode on devbroker: delivery, group split, rebalance on notification,
send-back and its local fallback, the sliding window, flow control, tag filters and close."""

from __future__ import annotations

import asyncio
import functools
from collections import Counter
from collections.abc import Sequence
from pathlib import Path

import pytest

from rocksidecar.devbroker import DevCluster
from rocksidecar.rmq.codes import RequestCode
from rocksidecar.rmq.consumer.config import ConsumeFrom, ConsumerConfig, ConsumeStatus, MessageModel
from rocksidecar.rmq.consumer.offset_store import LocalFileOffsetStore, ReadType
from rocksidecar.rmq.consumer.push_consumer import PushConsumer
from rocksidecar.rmq.message import MessageExt, MessageQueue
from tests.rmq.consumer.helpers import (
    WAIT_S,
    FailingClient,
    Recorder,
    owned,
    send_to_queues,
    settle,
    start,
    wired,
)

TOPIC = "ConsumeT"
start_ = functools.partial(start, topic=TOPIC)
owned_ = functools.partial(owned, topic=TOPIC)


def config(group: str, name: str, **kw: object) -> ConsumerConfig:
    kw.setdefault("consume_from", ConsumeFrom.FIRST_OFFSET)
    return ConsumerConfig(group, instance_name=name, client_ip="127.0.0.1", **kw)  # type: ignore[arg-type]


async def test_every_message_is_delivered_and_the_offsets_committed_on_close(
    cluster: DevCluster, consumers: list[PushConsumer]
) -> None:
    keys = await send_to_queues(cluster, TOPIC, 5)
    rec = Recorder()
    consumer = await start_(consumers, cluster, config("G-all", "one"), rec)
    assert len(owned_(consumer)) == 8  # 2 brokers x 4 queues
    await rec.until(lambda got: len(got) >= len(keys))
    assert sorted(rec.keys()) == sorted(keys)
    await consumer.close()
    for broker in cluster.brokers.values():
        assert [broker.offsets.query("G-all", TOPIC, q) for q in range(4)] == [5, 5, 5, 5]
        assert broker.clients.consumer_ids("G-all") == []  # unregistered


async def test_two_members_split_the_queues_and_rebalance_when_one_leaves(
    cluster: DevCluster, consumers: list[PushConsumer]
) -> None:
    await send_to_queues(cluster, TOPIC, 1)
    first, second = Recorder(), Recorder()
    a = await start_(consumers, cluster, config("G-split", "a"), first)
    assert len(owned_(a)) == 8
    b = await start_(consumers, cluster, config("G-split", "b"), second)
    # b's heartbeat made the brokers notify a, whose rebalance gives up half of the queues.
    await settle(a, lambda: len(owned_(a)) == 4)
    assert a.stats["notified"] >= 1
    assert owned_(a).isdisjoint(owned_(b))
    assert len(owned_(a)) == len(owned_(b)) == 4
    assert owned_(a) | owned_(b) == {MessageQueue(TOPIC, f"broker-{x}", q) for x in "ab" for q in range(4)}
    await b.close()  # persists, then unregisters: the brokers notify a at once
    await settle(a, lambda: len(owned_(a)) == 8)


async def test_a_failed_message_comes_back_through_the_retry_topic(
    cluster: DevCluster, consumers: list[PushConsumer]
) -> None:
    await send_to_queues(cluster, TOPIC, 1, queues=1)
    rec = Recorder(
        lambda m: ConsumeStatus.RECONSUME_LATER if m.reconsume_times == 0 else ConsumeStatus.SUCCESS
    )
    consumer = await start_(consumers, cluster, config("G-back", "one"), rec)
    await rec.until(lambda got: sum(1 for m in got if m.reconsume_times == 1) >= 2)
    again = [m for m in rec.got if m.reconsume_times == 1]
    assert {m.topic for m in again} == {TOPIC}  # the original topic, not %RETRY%G-back
    assert sorted(m.body for m in again) == [b"broker-a/0/0", b"broker-b/0/0"]
    assert consumer.stats["sent_back"] == 2
    retry = cluster.brokers["broker-a"].messages("%RETRY%G-back") + cluster.brokers["broker-b"].messages(
        "%RETRY%G-back"
    )
    assert len(retry) == 2


async def test_a_failed_send_back_is_retried_locally_and_never_dropped(
    cluster: DevCluster, consumers: list[PushConsumer]
) -> None:
    await send_to_queues(cluster, TOPIC, 3, queues=1)
    poison = b"broker-a/0/1"
    rec = Recorder(
        lambda m: (
            ConsumeStatus.RECONSUME_LATER
            if m.body == poison and m.reconsume_times < 2
            else ConsumeStatus.SUCCESS
        )
    )
    # The send-back fails, and so does Java's fallback, the send to the retry topic (3 attempts).
    client = FailingClient(
        {RequestCode.CONSUMER_SEND_MSG_BACK: 1, RequestCode.SEND_MESSAGE: 3, RequestCode.SEND_MESSAGE_V2: 3}
    )
    cfg = config("G-flaky", "one", send_back_retry_s=0.05)
    consumer = wired(PushConsumer(cfg, cluster.namesrv_addr, rec, client=client), client)
    consumer.subscribe(TOPIC)
    consumers.append(consumer)
    await consumer.start()
    # 1st try fails and its send-back (and resend) fails: consumed again here (reconsume 1), fails, sent
    # back. The broker counts from its stored copy, as Java's does: the retry topic redelivers it with
    # reconsume 1; that fails and goes back again; the next copy (reconsume 2) succeeds.
    await rec.until(lambda got: any(m.body == poison and m.reconsume_times == 2 for m in got))
    tries = [m.reconsume_times for m in rec.got if m.body == poison]
    assert tries == [0, 1, 1, 2]
    assert consumer.stats["send_back_failed"] == 1
    assert consumer.stats["sent_back"] == 2
    mq = MessageQueue(TOPIC, "broker-a", 0)
    await rec.until(lambda got: len(got) >= 8)  # the other messages were never held up
    assert consumer.queues[mq].pq.committed_offset() == 3


async def test_a_slow_message_holds_the_committed_offset(
    cluster: DevCluster, consumers: list[PushConsumer]
) -> None:
    await send_to_queues(cluster, TOPIC, 10, queues=1)
    release = asyncio.Event()
    slow = b"broker-a/0/2"

    class Slow(Recorder):
        async def __call__(self, msgs: Sequence[MessageExt], mq: MessageQueue) -> ConsumeStatus:
            if any(m.body == slow for m in msgs):
                await release.wait()
            return await super().__call__(msgs, mq)

    rec = Slow()
    consumer = await start_(consumers, cluster, config("G-slow", "one"), rec)
    await rec.until(lambda got: len(got) >= 19)  # all but the slow one
    mq = MessageQueue(TOPIC, "broker-a", 0)
    await consumer.persist_offsets()
    assert cluster.brokers["broker-a"].offsets.query("G-slow", TOPIC, 0) == 2  # not past offset 2
    assert cluster.brokers["broker-b"].offsets.query("G-slow", TOPIC, 0) == 10
    release.set()
    await rec.until(lambda got: len(got) >= 20)
    await consumer.persist_offsets()
    assert consumer.queues[mq].pq.committed_offset() == 10
    assert cluster.brokers["broker-a"].offsets.query("G-slow", TOPIC, 0) == 10


async def test_flow_control_pauses_pulling_until_consumption_makes_room(
    cluster: DevCluster, consumers: list[PushConsumer]
) -> None:
    await send_to_queues(cluster, TOPIC, 60, queues=1)
    gate = asyncio.Event()
    peak = Counter[MessageQueue]()

    class Gated(Recorder):
        async def __call__(self, msgs: Sequence[MessageExt], mq: MessageQueue) -> ConsumeStatus:
            state = consumer.queues[mq]
            peak[mq] = max(peak[mq], state.pq.count)
            await gate.wait()
            return await super().__call__(msgs, mq)

    rec = Gated()
    cfg = config("G-flow", "one", pull_threshold_for_queue=5, pull_batch_size=8, consume_concurrency=4)
    consumer = PushConsumer(cfg, cluster.namesrv_addr, rec)
    consumer.subscribe(TOPIC)
    consumers.append(consumer)
    await consumer.start()
    async with asyncio.timeout(WAIT_S):
        await consumer.stats.reach("flow_control_pauses", 2)  # one per queue of each broker
    assert all(state.pq.count <= 5 + 8 for state in consumer.queues.values())  # threshold + one batch
    gate.set()
    await rec.until(lambda got: len(got) >= 120)
    assert max(peak.values()) <= 13


async def test_tag_expression_filters(cluster: DevCluster, consumers: list[PushConsumer]) -> None:
    await send_to_queues(cluster, TOPIC, 2, tags="TagA", queues=1)
    await send_to_queues(cluster, TOPIC, 2, tags="TagB", queues=1)
    await send_to_queues(cluster, TOPIC, 2, tags="TagC", queues=1)
    rec = Recorder()
    consumer = await start_(consumers, cluster, config("G-tags", "one"), rec, "TagA || TagC")
    await rec.until(lambda got: len(got) >= 8)
    assert Counter(m.tags for m in rec.got) == {"TagA": 4, "TagC": 4}
    mq = MessageQueue(TOPIC, "broker-a", 0)
    await rec.until(lambda got: consumer.queues[mq].pq.committed_offset() == 6)  # past the TagBs too


async def test_resumes_from_the_committed_offset(cluster: DevCluster, consumers: list[PushConsumer]) -> None:
    await send_to_queues(cluster, TOPIC, 4, queues=1)
    for broker in cluster.brokers.values():
        broker.offsets.commit("G-resume", TOPIC, 0, 3)
    rec = Recorder()
    await start_(consumers, cluster, config("G-resume", "one"), rec)
    await rec.until(lambda got: len(got) >= 2)
    assert sorted(m.body for m in rec.got) == [b"broker-a/0/3", b"broker-b/0/3"]


async def test_close_persists_offsets_before_it_unregisters(
    cluster: DevCluster, consumers: list[PushConsumer]
) -> None:
    await send_to_queues(cluster, TOPIC, 2, queues=1)
    client = FailingClient()
    rec = Recorder()
    consumer = wired(PushConsumer(config("G-order", "one"), cluster.namesrv_addr, rec, client=client), client)
    consumer.subscribe(TOPIC)
    await consumer.start()
    await rec.until(lambda got: len(got) >= 4)
    client.codes.clear()
    await consumer.close()
    updates = [i for i, c in enumerate(client.codes) if c == RequestCode.UPDATE_CONSUMER_OFFSET]
    unregisters = [i for i, c in enumerate(client.codes) if c == RequestCode.UNREGISTER_CLIENT]
    assert updates and unregisters and max(updates) < min(unregisters)
    assert cluster.brokers["broker-a"].offsets.query("G-order", TOPIC, 0) == 2


async def test_broadcasting_delivers_everything_to_every_member(
    cluster: DevCluster, consumers: list[PushConsumer], tmp_path: Path
) -> None:
    keys = await send_to_queues(cluster, TOPIC, 2, queues=2)
    recs = [Recorder(), Recorder()]
    members = [
        await start_(
            consumers,
            cluster,
            config("G-bc", name, message_model=MessageModel.BROADCASTING, offsets_dir=tmp_path),
            rec,
        )
        for name, rec in zip(("x", "y"), recs, strict=True)
    ]
    for rec in recs:
        await rec.until(lambda got: len(got) >= len(keys))
        assert sorted(rec.keys()) == sorted(keys)
    await members[0].close()
    assert isinstance(members[0].offsets, LocalFileOffsetStore)
    saved = LocalFileOffsetStore(members[0].offsets.path)
    await saved.load()
    assert await saved.read(MessageQueue(TOPIC, "broker-b", 1), ReadType.MEMORY) == 2


async def test_after_max_reconsume_times_the_broker_moves_it_to_the_dlq(
    cluster: DevCluster, consumers: list[PushConsumer]
) -> None:
    await send_to_queues(cluster, TOPIC, 1, queues=1)
    rec = Recorder(lambda m: ConsumeStatus.RECONSUME_LATER)  # a poison message: always fails
    consumer = await start_(consumers, cluster, config("G-dlq", "one", max_reconsume_times=2), rec)
    await consumer.stats.reach("sent_back", 6)  # 2 messages x (first try + 2 reconsumes)
    dead = [m for b in cluster.brokers.values() for m in b.messages("%DLQ%G-dlq")]
    assert sorted(m.body for m in dead) == [b"broker-a/0/0", b"broker-b/0/0"]
    assert sorted(m.reconsume_times for m in rec.got) == [0, 0, 1, 1, 2, 2]


@pytest.mark.parametrize("model", [MessageModel.BROADCASTING, MessageModel.CLUSTERING])
async def test_retry_locally_forever_holds_a_failing_message_past_max_reconsume_times(
    cluster: DevCluster, consumers: list[PushConsumer], tmp_path: Path, model: MessageModel
) -> None:
    """A listener whose store fails for a while: its messages are neither dropped (broadcasting) nor
    sent back towards the DLQ (clustering), and the offset stays before them until they succeed."""
    await send_to_queues(cluster, TOPIC, 1, queues=1)
    rec = Recorder(
        lambda m: ConsumeStatus.RECONSUME_LATER if m.reconsume_times < 5 else ConsumeStatus.SUCCESS
    )
    cfg = config(
        "G-forever", "one", message_model=model, offsets_dir=tmp_path, max_reconsume_times=1,
        send_back_retry_s=0.01, retry_locally_forever=True,
    )  # fmt: skip
    consumer = await start_(consumers, cluster, cfg, rec)
    queues = [MessageQueue(TOPIC, f"broker-{x}", 0) for x in "ab"]
    # past max_reconsume_times and still failing: held, the offsets before them
    await rec.until(lambda got: sum(m.reconsume_times == 3 for m in got) == 2)
    assert [await consumer.offsets.read(mq, ReadType.MEMORY) for mq in queues] in ([None, None], [0, 0])
    await rec.until(lambda got: sum(m.reconsume_times == 5 for m in got) == 2)
    assert sorted(m.reconsume_times for m in rec.got) == sorted([0, 1, 2, 3, 4, 5] * 2)
    assert {m.topic for m in rec.got} == {TOPIC}  # consumed again here, never through %RETRY%
    assert consumer.stats["sent_back"] == 0
    for broker in cluster.brokers.values():
        assert broker.messages("%DLQ%G-forever") == []
    await consumer.close()  # persists: the offsets passed them once they succeeded
    if model is MessageModel.CLUSTERING:
        assert [b.offsets.query("G-forever", TOPIC, 0) for b in cluster.brokers.values()] == [1, 1]
    else:
        assert isinstance(consumer.offsets, LocalFileOffsetStore)
        saved = LocalFileOffsetStore(consumer.offsets.path)
        await saved.load()
        assert [await saved.read(mq, ReadType.MEMORY) for mq in queues] == [1, 1]


def test_retry_locally_forever_is_for_concurrent_mode() -> None:
    with pytest.raises(ValueError, match="retry_locally_forever"):
        config("G-forever", "one", orderly=True, retry_locally_forever=True)


async def test_a_listener_that_hangs_past_the_consume_timeout_counts_as_failed(
    cluster: DevCluster, consumers: list[PushConsumer]
) -> None:
    await send_to_queues(cluster, TOPIC, 1, queues=1)
    hang = asyncio.Event()

    class Hangs(Recorder):
        async def __call__(self, msgs: Sequence[MessageExt], mq: MessageQueue) -> ConsumeStatus:
            if msgs[0].reconsume_times == 0:
                await hang.wait()  # never set
            return await super().__call__(msgs, mq)

    rec = Hangs()
    consumer = await start_(consumers, cluster, config("G-hang", "one", consume_timeout_s=0.05), rec)
    await rec.until(lambda got: len(got) >= 2)  # both came back through the retry topic
    assert {m.reconsume_times for m in rec.got} == {1}
    assert consumer.stats["consume_failed"] == 2


def test_flow_control_thresholds() -> None:
    consumer = PushConsumer(
        config(
            "G-fc",
            "one",
            pull_threshold_for_queue=3,
            pull_threshold_size_for_queue_mib=1,
            consume_max_span=10,
        ),
        "127.0.0.1:1",
        Recorder(),
    )
    from rocksidecar.rmq.consumer.process_queue import ProcessQueue
    from tests.rmq.consumer.factory import stored

    pq = ProcessQueue(0)
    pq.put([stored(0), stored(1), stored(2)], 3)
    assert not consumer._flow_controlled(pq)
    pq.put([stored(3)], 4)
    assert consumer._flow_controlled(pq)  # count
    big = ProcessQueue(0)
    big.put([stored(0, b"x" * (1024 * 1024 + 1))], 1)
    assert consumer._flow_controlled(big)  # size
    wide = ProcessQueue(0)
    wide.put([stored(0), stored(11)], 12)
    assert consumer._flow_controlled(wide)  # span: offset 0 stuck while 11 is cached


async def test_a_queue_rebalanced_away_lets_its_running_calls_finish_and_the_new_owner_redelivers(
    cluster: DevCluster, consumers: list[PushConsumer]
) -> None:
    await send_to_queues(cluster, TOPIC, 1)
    release, all_in = asyncio.Event(), asyncio.Event()
    finished: list[bytes] = []
    cancelled: list[bytes] = []
    entered = 0

    class Blocking(Recorder):
        async def __call__(self, msgs: Sequence[MessageExt], mq: MessageQueue) -> ConsumeStatus:
            nonlocal entered
            entered += len(msgs)
            if entered >= 8:
                all_in.set()
            try:
                await release.wait()
            except asyncio.CancelledError:
                cancelled.extend(m.body for m in msgs)
                raise
            finished.extend(m.body for m in msgs)
            return await super().__call__(msgs, mq)

    a_rec, b_rec = Blocking(), Recorder()
    a = await start_(consumers, cluster, config("G-away", "a"), a_rec)
    async with asyncio.timeout(WAIT_S):
        await all_in.wait()  # every message is in a's listener
    b = await start_(consumers, cluster, config("G-away", "b"), b_rec)
    await settle(a, lambda: len(owned_(a)) == 4)
    moved = owned_(b)
    await b_rec.until(lambda got: len(got) >= 4)  # b redelivers the moved queues' messages at once
    release.set()
    await a_rec.until(lambda got: len(got) >= 8)
    assert cancelled == [] and len(finished) == 8
    for mq in moved:  # a's late results for them moved nothing; b's committed them
        assert await a.offsets.read(mq, ReadType.MEMORY) is None
    await b.persist_offsets()
    for mq in moved:
        assert cluster.brokers[mq.broker_name].offsets.query("G-away", TOPIC, mq.queue_id) == 1
