"""A compressed body no consumer can inflate, on real RocketMQ 4.9.4: any producer may send a record with
the COMPRESSED sysflag and a zlib bomb (a few KB that inflate past the 16 MiB limit) or a corrupt lz4
body; the broker stores it as sent. A push consumer group delivers the good messages after it, commits
past it, and CONSUMER_SEND_MSG_BACK with delay level -1 puts the broker's own copy in %DLQ%<group>
(still compressed). Before, every pull of that queue from the bad offset on failed, for ever. Skipped
unless ROCKSIDECAR_TEST_NAMESRV is set (see conftest.py)."""

from __future__ import annotations

import asyncio
import os
import zlib

from rocksidecar.rmq import BrokerApi, Message, MessageQueue, NameServerClient, RemotingClient, new_uniq_id
from rocksidecar.rmq.codes import (
    SYSFLAG_COMPRESSED,
    SYSFLAG_COMPRESSION_LZ4,
    SYSFLAG_COMPRESSION_ZLIB,
    RequestCode,
    ResponseCode,
)
from rocksidecar.rmq.consumer import ConsumeFrom, ConsumerConfig, PushConsumer
from rocksidecar.rmq.message_codec import MAX_BODY_BYTES
from rocksidecar.rmq.protocol.frame import RemotingCommand
from tests.realbroker.conftest import create_topic_everywhere, unique_topic
from tests.rmq.consumer.helpers import Recorder

WAIT_S = 60.0
ZLIB = SYSFLAG_COMPRESSED | SYSFLAG_COMPRESSION_ZLIB
LZ4 = SYSFLAG_COMPRESSED | SYSFLAG_COMPRESSION_LZ4
BOMB = zlib.compress(b"\0" * (2 * MAX_BODY_BYTES), 9)  # 32 MiB from ~32 KB


async def send_raw(client: RemotingClient, addr: str, mq: MessageQueue, body: bytes, sys_flag: int) -> str:
    """SEND_MESSAGE_V2 with the body and sysflag as given (rmq's own header): what any producer can send."""
    api = BrokerApi(client, producer_group="rs_inflate_test")
    key = new_uniq_id()
    props = Message(mq.topic, b"-").wire_properties(key)
    header = api._send_header(mq, sys_flag, 0, props, batch=False, default_topic="TBW102")
    resp = await client.invoke(addr, RemotingCommand(RequestCode.SEND_MESSAGE_V2, header, body), 10.0)
    assert resp.code == ResponseCode.SUCCESS, resp.remark
    return key


async def test_a_bomb_and_a_corrupt_body_go_to_the_dlq_and_the_queue_moves_on(
    namesrv_addr: str, client: RemotingClient
) -> None:
    api = BrokerApi(client)
    topic = unique_topic("RsInflate")
    route = await create_topic_everywhere(NameServerClient(client, namesrv_addr), api, topic)
    mq = sorted(route.publish_queues(topic), key=str)[0]
    addr = route.master_addr(mq.broker_name) or ""
    first = await send_raw(client, addr, mq, b"good-0", 0)
    bomb = await send_raw(client, addr, mq, BOMB, ZLIB)
    second = await send_raw(client, addr, mq, zlib.compress(b"good-2" * 1000), ZLIB)
    corrupt = await send_raw(client, addr, mq, b"\x04\x22\x4d\x18garbage", LZ4)
    third = await send_raw(client, addr, mq, b"good-4", 0)

    group = f"rs_inflate_{os.getpid()}_{topic[-8:]}"
    rec = Recorder()
    cfg = ConsumerConfig(group, instance_name=f"one-{os.getpid()}", consume_from=ConsumeFrom.FIRST_OFFSET)
    consumer = PushConsumer(cfg, namesrv_addr, rec)
    consumer.subscribe(topic)
    try:
        await consumer.start()
        async with asyncio.timeout(WAIT_S):
            while len(rec.got) < 3:
                rec.changed.clear()
                await rec.changed.wait()
            await consumer.stats.reach("undecodable_dead_lettered", 2)
    finally:
        await consumer.close()
    assert [m.uniq_key for m in rec.got] == [first, second, third]
    assert rec.got[1].body == b"good-2" * 1000
    assert consumer.stats["undecodable"] == 2 and consumer.stats["pull_errors"] == 0
    assert await api.query_consumer_offset(addr, group, mq) == 5

    # 4.9.4 makes %DLQ%<group> (one queue) readable and writable on the broker of the send-back; its
    # consume queue is written a moment after the send-back's answer: polled.
    dlq = MessageQueue(f"%DLQ%{group}", mq.broker_name, 0)
    dead: list[str] = []
    async with asyncio.timeout(WAIT_S):
        while len(dead) < 2:
            result = await api.pull(addr, group, dlq, 0, max_nums=32, timeout_s=10.0)
            assert result.messages == []  # they still do not decode: the broker copied them as stored
            dead = [u.message.uniq_key or "" for u in result.undecodable]
            if len(dead) < 2:
                await asyncio.sleep(0.2)
    assert sorted(dead) == sorted([bomb, corrupt])
    stored = await api.pull(
        addr, group, dlq, 0, max_nums=32, timeout_s=10.0, max_body_bytes=3 * MAX_BODY_BYTES
    )
    assert [m.body for m in stored.messages] == [b"\0" * (2 * MAX_BODY_BYTES)]  # byte for byte, inflatable
