"""The client (RemotingClient, NameServerClient, BrokerApi) against DevCluster for every request of
issue 2: routes and auto-creation, sends to explicit queues on both brokers, batches, heartbeats,
pulls decoded field by field, compressed bodies, offsets, consumer lists with change notifications,
topic creation, a broker dropped mid-request, and a long poll answered by a send."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from dataclasses import dataclass

import pytest

from rocksidecar.devbroker import DevBroker, DevCluster
from rocksidecar.rmq.broker import BrokerApi, ConsumerData, Subscription
from rocksidecar.rmq.codes import SYSFLAG_COMPRESSED, RequestCode, ResponseCode
from rocksidecar.rmq.connection import Connection
from rocksidecar.rmq.errors import BrokerError, ConnectError, ConnectionClosed, TopicNotExist
from rocksidecar.rmq.message import Message, MessageQueue, decode_properties
from rocksidecar.rmq.msgid import new_uniq_id
from rocksidecar.rmq.namesrv import NameServerClient
from rocksidecar.rmq.pool import RemotingClient
from rocksidecar.rmq.protocol.frame import RemotingCommand
from rocksidecar.rmq.result import PullStatus, SendResult, SendStatus

PROMPT_S = 1.0  # "fails fast" / "answers promptly": far below the timeouts used


@dataclass
class Env:
    cluster: DevCluster
    client: RemotingClient
    ns: NameServerClient
    api: BrokerApi

    def broker(self, name: str) -> DevBroker:
        return self.cluster.brokers[name]

    def addr(self, name: str) -> str:
        return self.cluster.brokers[name].addr


@pytest.fixture
async def env() -> AsyncIterator[Env]:
    async with DevCluster(brokers=2, queues=4) as cluster:
        client = RemotingClient()
        yield Env(cluster, client, NameServerClient(client, cluster.namesrv_addr), BrokerApi(client))
        await client.close()


async def send(env: Env, broker: str, topic: str, queue_id: int, msg: Message | None = None) -> SendResult:
    message = msg or Message(topic, b"body")
    return await env.api.send(
        env.addr(broker), MessageQueue(topic, broker, queue_id), message, new_uniq_id(), 3.0
    )


async def test_unknown_topic_is_auto_created_through_the_template_route(env: Env) -> None:
    with pytest.raises(TopicNotExist):
        await env.ns.get_route("Fresh")
    template = (await env.ns.get_route("TBW102")).clamp_queues(2)
    queues = template.publish_queues("Fresh")
    assert [(q.broker_name, q.queue_id) for q in queues] == [
        ("broker-a", 0),
        ("broker-a", 1),
        ("broker-b", 0),
        ("broker-b", 1),
    ]
    mq = queues[3]
    result = await env.api.send(env.addr(mq.broker_name), mq, Message("Fresh", b"x"), new_uniq_id(), 3.0)
    assert (result.status, result.queue, result.queue_offset) == (SendStatus.SEND_OK, mq, 0)
    route = await env.ns.get_route("Fresh")
    assert [(q.broker_name, q.write_queue_nums) for q in route.queue_datas] == [("broker-b", 4)]
    assert route.master_addr("broker-b") == env.addr("broker-b")


async def test_send_v2_to_explicit_queues_on_both_brokers(env: Env) -> None:
    for broker in ("broker-a", "broker-b"):
        for queue_id in (0, 3, 3):
            result = await send(env, broker, "Explicit", queue_id)
            assert result.queue == MessageQueue("Explicit", broker, queue_id)
    for broker in ("broker-a", "broker-b"):
        b = env.broker(broker)
        assert [len(b.messages("Explicit", q)) for q in range(4)] == [1, 0, 0, 2]
        assert [m.queue_offset for m in b.messages("Explicit", 3)] == [0, 1]


async def test_batch_gets_consecutive_offsets_and_pulls_back(env: Env) -> None:
    mq = MessageQueue("Batch", "broker-b", 1)
    await send(env, "broker-b", "Batch", 1)
    messages = [Message("Batch", f"m{i}".encode(), tags="T", keys=(f"k{i}",)) for i in range(10)]
    ids = [new_uniq_id() for _ in messages]
    result = await env.api.send_batch(env.addr("broker-b"), mq, messages, ids, 3.0)
    assert result.queue_offset == 1 and result.msg_id == ",".join(ids)
    assert len(result.offset_msg_id.split(",")) == 10
    pulled = await env.api.pull(env.addr("broker-b"), "cg", mq, 1)
    assert [(m.body, m.uniq_key, m.keys, m.queue_offset) for m in pulled.messages] == [
        (f"m{i}".encode(), ids[i], (f"k{i}",), 1 + i) for i in range(10)
    ]
    assert pulled.messages[0].offset_msg_id == result.offset_msg_id.split(",")[0]


async def test_pull_decodes_every_field(env: Env) -> None:
    addr = env.addr("broker-a")
    mq = MessageQueue("Fields", "broker-a", 2)
    msg = Message(
        "Fields",
        b"\x00payload\xff",
        tags="TagA",
        keys=("k1", "k2"),
        properties={"who": "ünï", "n": "1"},
        flag=7,
    )
    uniq = new_uniq_id()
    sent = await env.api.send(addr, mq, msg, uniq, 3.0)
    conn = await env.client.connection(addr)
    local_host, local_port = conn._transport.get_extra_info("sockname")[:2]  # type: ignore[union-attr]
    result = await env.api.pull(addr, "cg", mq, 0, expression="TagA")
    assert (result.status, result.next_begin_offset, result.min_offset, result.max_offset) == (
        PullStatus.FOUND,
        1,
        0,
        1,
    )
    (got,) = result.messages
    assert (got.body, got.tags, got.keys, got.flag) == (b"\x00payload\xff", "TagA", ("k1", "k2"), 7)
    assert got.user_properties == {"who": "ünï", "n": "1"}
    assert (got.uniq_key, got.msg_id, got.offset_msg_id) == (uniq, uniq, sent.offset_msg_id)
    assert (got.topic, got.queue_id, got.queue_offset) == ("Fields", 2, sent.queue_offset)
    assert got.born_host == f"{local_host}:{local_port}" and got.store_host == addr
    assert got.properties["CLUSTER"] == "DefaultCluster" and "WAIT" not in got.properties
    assert got.store_timestamp_ms >= got.born_timestamp_ms - 1000


async def test_pull_as_records_gives_the_same_messages(env: Env) -> None:
    """as_records: the bulk readers' tuples of the same pull, the tag filter applied alike."""
    addr = env.addr("broker-a")
    mq = MessageQueue("Records", "broker-a", 1)
    for i, tag in enumerate(["TagA", "TagB", "TagA"]):
        await env.api.send(addr, mq, Message("Records", f"m{i}".encode(), tags=tag), new_uniq_id(), 3.0)
    for expression in ("*", "TagA"):
        full = await env.api.pull(addr, "cg", mq, 0, expression=expression)
        raw = await env.api.pull(addr, "cg", mq, 0, expression=expression, as_records=True)
        assert raw.messages == [] and full.records == []
        assert [(r[0], r[1], decode_properties(r[2])) for r in raw.records] == [
            (m.queue_offset, m.body, m.properties) for m in full.messages
        ]
        assert raw.next_begin_offset == full.next_begin_offset == 3
    assert [r[1] for r in raw.records] == [b"m0", b"m2"]


async def test_compressed_bodies_round_trip(env: Env) -> None:
    body = bytes(range(256)) * 40  # over 4 KiB: the client compresses it
    mq = MessageQueue("Big", "broker-a", 0)
    await env.api.send(env.addr("broker-a"), mq, Message("Big", body), new_uniq_id(), 3.0)
    (stored,) = env.broker("broker-a").messages("Big", 0)
    assert stored.sys_flag & SYSFLAG_COMPRESSED
    (got,) = (await env.api.pull(env.addr("broker-a"), "cg", mq, 0)).messages
    assert got.body == body


async def test_offsets(env: Env) -> None:
    addr, mq = env.addr("broker-b"), MessageQueue("Off", "broker-b", 1)
    for _ in range(5):
        await send(env, "broker-b", "Off", 1)
    assert (await env.api.get_max_offset(addr, mq), await env.api.get_min_offset(addr, mq)) == (5, 0)
    assert await env.api.query_consumer_offset(addr, "cg", mq) == 0  # never committed, queue starts at 0
    await env.api.update_consumer_offset(addr, "cg", mq, 3)
    assert await env.api.query_consumer_offset(addr, "cg", mq) == 3
    await env.api.update_consumer_offset(addr, "cg", mq, 4, oneway=True)
    assert await env.api.query_consumer_offset(addr, "cg", mq) == 4
    last = env.broker("broker-b").messages("Off", 1)[-1]
    assert await env.api.search_offset(addr, mq, last.store_timestamp_ms + 10_000) == 4


async def test_heartbeat_consumer_list_notify_and_unregister(env: Env) -> None:
    addr = env.addr("broker-a")
    notified: asyncio.Queue[str] = asyncio.Queue()

    async def on_request(conn: Connection, cmd: RemotingCommand) -> None:
        if cmd.code == RequestCode.NOTIFY_CONSUMER_IDS_CHANGED and cmd.is_oneway:
            notified.put_nowait(cmd.ext_fields["consumerGroup"])

    listening = RemotingClient(on_request=on_request)
    other_client = RemotingClient()
    other = BrokerApi(other_client)
    consumer = ConsumerData("cg", (Subscription("Topic", "*"),))
    try:
        version = await BrokerApi(listening).heartbeat(addr, "client-1", ["pg"], [consumer])
        assert version == 401
        assert await asyncio.wait_for(notified.get(), PROMPT_S) == "cg"  # its own joining
        await other.heartbeat(addr, "client-2", [], [consumer])
        assert await asyncio.wait_for(notified.get(), PROMPT_S) == "cg"  # another member joined
        assert sorted(await env.api.get_consumer_list(addr, "cg")) == ["client-1", "client-2"]
        await other.unregister_client(addr, "client-2", consumer_group="cg", producer_group="pg")
        assert await asyncio.wait_for(notified.get(), PROMPT_S) == "cg"  # a member left
        assert await env.api.get_consumer_list(addr, "cg") == ["client-1"]
        assert await env.api.get_consumer_list(addr, "nobody") == []
    finally:
        await listening.close()
        await other_client.close()


async def test_create_topic(env: Env) -> None:
    await env.api.create_topic(env.addr("broker-a"), "Created", read_queue_nums=3, write_queue_nums=3)
    route = await env.ns.get_route("Created")
    assert [(q.broker_name, q.write_queue_nums, q.perm) for q in route.queue_datas] == [("broker-a", 3, 6)]
    await send(env, "broker-a", "Created", 2)
    with pytest.raises(BrokerError) as info:
        await send(env, "broker-a", "Created", 3)
    assert info.value.code == ResponseCode.SYSTEM_ERROR


async def test_injected_failures_surface_as_typed_errors(env: Env) -> None:
    env.broker("broker-a").faults.fail_next_sends(1, ResponseCode.SERVICE_NOT_AVAILABLE, "going down")
    with pytest.raises(BrokerError) as info:
        await send(env, "broker-a", "F", 0)
    assert (info.value.code, info.value.remark, info.value.retriable) == (
        ResponseCode.SERVICE_NOT_AVAILABLE,
        "going down",
        True,
    )
    await send(env, "broker-a", "F", 0)


async def test_broker_dropped_mid_send_fails_fast_and_retriable(env: Env) -> None:
    b = env.broker("broker-a")
    mq = MessageQueue("Drop", "broker-a", 0)
    await env.api.create_topic(b.addr, "Drop")
    b.faults.latency_s = 30.0
    loop = asyncio.get_running_loop()
    start = loop.time()
    pending = asyncio.create_task(env.api.send(b.addr, mq, Message("Drop", b"x"), new_uniq_id(), 20.0))
    # A round trip behind it on the same connection: the broker now holds the send in its latency.
    assert await env.api.get_max_offset(b.addr, mq) == 0
    assert not pending.done()
    assert b.drop_connections() == 1
    with pytest.raises(ConnectionClosed) as info:
        await pending
    assert info.value.retriable and loop.time() - start < PROMPT_S
    assert b.messages("Drop") == []  # cut off before it was stored


async def test_stopped_broker_refuses_connections_retriably(env: Env) -> None:
    b = env.broker("broker-b")
    addr = b.addr
    await b.stop()
    with pytest.raises(ConnectError) as info:
        await env.api.get_max_offset(addr, MessageQueue("T", "broker-b", 0))
    assert info.value.retriable
    await b.start()
    assert await env.api.get_max_offset(addr, MessageQueue("T", "broker-b", 0)) == 0


async def test_long_poll_is_answered_as_soon_as_a_message_arrives(env: Env) -> None:
    addr, mq = env.addr("broker-b"), MessageQueue("Poll", "broker-b", 1)
    await env.api.create_topic(addr, "Poll")
    loop = asyncio.get_running_loop()
    pull = asyncio.create_task(env.api.pull(addr, "cg", mq, 0, suspend_s=20.0))
    assert await env.api.get_max_offset(addr, mq) == 0  # a round trip: the pull is parked now
    assert len(env.broker("broker-b").holds) == 1 and not pull.done()
    start = loop.time()
    sent = await env.api.send(addr, mq, Message("Poll", b"wake up"), new_uniq_id(), 3.0)
    result = await asyncio.wait_for(pull, PROMPT_S)
    assert loop.time() - start < PROMPT_S
    assert result.status is PullStatus.FOUND and [m.body for m in result.messages] == [b"wake up"]
    assert result.messages[0].offset_msg_id == sent.offset_msg_id
