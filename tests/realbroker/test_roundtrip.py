"""10 000 messages to explicit queues on both real brokers, singly and in batches, pulled back and
compared field by field (issue 2); and single sends coalesced into batches (issue 18)."""

from __future__ import annotations

import asyncio
import random

import pytest

from rocksidecar.delay.message import DELAY_DUE_AT, DELAY_PUBLISHED_AT
from rocksidecar.rmq import (
    BrokerApi,
    Message,
    MessageQueue,
    NameServerClient,
    RemotingClient,
    SendResult,
    new_uniq_id,
)
from rocksidecar.rmq.errors import RocketMQError
from rocksidecar.rmq.message import PROPERTIES_LIMIT, PROPERTIES_MAX_BYTES
from rocksidecar.rmq.producer import Producer, ProducerConfig
from rocksidecar.rmq.producer.coalesce import CoalescingSender
from tests.fakes import fullest_message
from tests.realbroker.conftest import create_topic_everywhere, pull_all, unique_topic

SINGLES = 5000
BATCHES = 100
BATCH_SIZE = 50


def make_message(rng: random.Random, topic: str, i: int) -> Message:
    size = rng.choice([1, 16, 256, 1024, 5000, 20000])  # > 4 KiB bodies travel compressed
    body = bytes(rng.getrandbits(8) for _ in range(min(size, 64))) * (size // 64 + 1)
    props = {
        f"p{j}": rng.choice(["ascii", "ünïcödé", "汉字", "emoji 😀", "a=b;c"]) + str(i)
        for j in range(rng.randint(0, 3))
    }
    keys = tuple(f"k{i}-{j}" for j in range(rng.randint(0, 2)))
    return Message(
        topic,
        body[:size],
        tags=rng.choice([None, "TagA", "标签"]),
        keys=keys,
        properties=props,
        flag=rng.randint(0, 1000),
        id=new_uniq_id(),
    )


async def test_ten_thousand_messages_round_trip(namesrv_addr: str, client: RemotingClient) -> None:
    ns = NameServerClient(client, namesrv_addr)
    api = BrokerApi(client, producer_group="rs_rt")
    topic = unique_topic("RsRoundTrip")
    route = await create_topic_everywhere(ns, api, topic)
    queues = route.publish_queues(topic)
    assert {q.broker_name for q in queues} == {"broker-a", "broker-b"}
    rng = random.Random(42)
    expected: dict[tuple[str, int, int], Message] = {}  # (broker, queue, offset) -> message
    sem = asyncio.Semaphore(64)

    async def single(i: int) -> None:
        mq = queues[i % len(queues)]
        msg = make_message(rng, topic, i)
        async with sem:
            res = await api.send(route.master_addr(mq.broker_name), mq, msg, msg.id, 10.0)  # type: ignore[arg-type]
        assert res.msg_id == msg.id and res.queue == mq
        expected[(mq.broker_name, mq.queue_id, res.queue_offset)] = msg

    async def batch(b: int) -> None:
        mq: MessageQueue = queues[b % len(queues)]
        msgs = [make_message(rng, topic, SINGLES + b * BATCH_SIZE + k) for k in range(BATCH_SIZE)]
        async with sem:
            res = await api.send_batch(
                route.master_addr(mq.broker_name),
                mq,
                msgs,  # type: ignore[arg-type]
                [m.id for m in msgs],
                10.0,
            )  # type: ignore[misc]
        assert (
            res.msg_id.split(",") == [m.id for m in msgs] and len(res.offset_msg_id.split(",")) == BATCH_SIZE
        )
        for k, m in enumerate(msgs):
            expected[(mq.broker_name, mq.queue_id, res.queue_offset + k)] = m

    await asyncio.gather(*(single(i) for i in range(SINGLES)), *(batch(b) for b in range(BATCHES)))
    assert len(expected) == SINGLES + BATCHES * BATCH_SIZE == 10_000

    pulled = await pull_all(api, route, topic, "rs_rt_check", expected)
    assert len(pulled) == 10_000
    brokers = {q.broker_name: route.master_addr(q.broker_name) for q in queues}
    for m in pulled:
        broker = next(name for name, addr in brokers.items() if m.store_host == addr)
        sent = expected[(broker, m.queue_id, m.queue_offset)]
        assert m.topic == topic and m.body == sent.body and m.flag == sent.flag
        assert m.tags == sent.tags and m.keys == sent.keys and m.uniq_key == sent.id
        assert m.user_properties == dict(sent.properties), m.properties
        assert m.offset_msg_id.startswith("7F000001")


async def test_coalesced_single_sends_are_stored_whole_at_their_callers_offsets(
    namesrv_addr: str, client: RemotingClient
) -> None:
    """64 concurrent callers, each sending single messages through the coalescer (issue 18): RocketMQ
    4.9.4 stores every message once, with its own fields, at the queue and offset its caller was told."""
    ns = NameServerClient(client, namesrv_addr)
    api = BrokerApi(client, producer_group="rs_coalesce")
    topic = unique_topic("RsCoalesce")
    route = await create_topic_everywhere(ns, api, topic)
    producer = Producer(ns, api, ProducerConfig(group="rs_coalesce"))
    await producer.start()
    sender = CoalescingSender(producer)
    rng = random.Random(7)
    expected: dict[tuple[str, int, int], Message] = {}

    async def caller(c: int) -> None:
        for n in range(40):
            msg = make_message(rng, topic, c * 100 + n)
            key = f"order-{c % 5}" if c % 2 else None
            res = await sender.send(msg, sharding_key=key, validated=True)
            assert res.msg_id == msg.id
            expected[(res.queue.broker_name, res.queue.queue_id, res.queue_offset)] = msg

    try:
        await asyncio.gather(*(caller(c) for c in range(64)))
    finally:
        await producer.close()
    assert len(expected) == 64 * 40 and sender.batches > 0
    assert sender.coalesced > len(expected) // 2  # most went in batches
    pulled = await pull_all(api, route, topic, "rs_coalesce_check", expected)
    assert len(pulled) == len(expected)
    addrs = {b.broker_name: route.master_addr(b.broker_name) for b in route.broker_datas}
    for m in pulled:
        broker = next(name for name, addr in addrs.items() if m.store_host == addr)
        sent = expected[(broker, m.queue_id, m.queue_offset)]
        assert (m.body, m.flag, m.tags, m.keys, m.uniq_key) == (
            sent.body,
            sent.flag,
            sent.tags,
            sent.keys,
            sent.id,
        )
        assert m.user_properties == dict(sent.properties)


async def test_properties_at_the_producers_limit_are_stored_even_with_delay_items_added(
    namesrv_addr: str, client: RemotingClient
) -> None:
    """Message.validate leaves BROKER_ITEMS_BYTES under the broker's bound for the items the broker adds
    (CLUSTER) and those a delayed message is published with (DELAY_*): RocketMQ 4.9.4 stores a message
    right at validate's limit, alone and in a batch, and one at the limit with the DELAY_* items added;
    it refuses one at the broker's bound itself (the room is needed)."""
    ns = NameServerClient(client, namesrv_addr)
    api = BrokerApi(client, producer_group="rs_props")
    topic = unique_topic("RsProps")
    await create_topic_everywhere(ns, api, topic)
    producer = Producer(ns, api, ProducerConfig(group="rs_props"))
    await producer.start()
    try:
        at_limit = fullest_message(topic, PROPERTIES_LIMIT)
        at_limit.validate()
        assert isinstance(await producer.send(at_limit), SendResult)
        batch = [Message(topic, b"a"), fullest_message(topic, PROPERTIES_LIMIT), Message(topic, b"c")]
        assert all(isinstance(r, SendResult) for r in await producer.send_batch(batch))
        delayed = fullest_message(topic, PROPERTIES_LIMIT)
        due = str(2_000_000_000_000)
        published = Message(topic, delayed.body, properties={**delayed.properties, DELAY_DUE_AT: due,
                            DELAY_PUBLISHED_AT: due}, id=delayed.id)  # fmt: skip
        assert isinstance(await producer.send(published, validated=True), SendResult)
        with pytest.raises(RocketMQError):
            await producer.send(fullest_message(topic, PROPERTIES_MAX_BYTES), validated=True)
    finally:
        await producer.close()
