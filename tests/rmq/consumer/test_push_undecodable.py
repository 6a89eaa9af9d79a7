"""A record no consumer can decode (a zlib bomb past the limit, a corrupt lz4 or zstd body)
sent by any producer with the COMPRESSED sysflag, on devbroker: the good messages
around it are delivered, the queue's offset moves past it, and it goes to the group's DLQ as the broker
stored it (once, logged and counted), instead of failing every pull of the queue from its offset on."""

from __future__ import annotations

import dataclasses
import functools
import logging
import zlib
from pathlib import Path
from typing import Any

import pytest
import zstandard

from rocksidecar.devbroker import DevCluster
from rocksidecar.rmq.broker import BrokerApi
from rocksidecar.rmq.codes import (
    SYSFLAG_COMPRESSED,
    SYSFLAG_COMPRESSION_LZ4,
    SYSFLAG_COMPRESSION_ZLIB,
    SYSFLAG_COMPRESSION_ZSTD,
    RequestCode,
)
from rocksidecar.rmq.consumer.config import ConsumeFrom, ConsumerConfig, MessageModel
from rocksidecar.rmq.consumer.push_consumer import PushConsumer
from rocksidecar.rmq.message import Message, MessageQueue
from rocksidecar.rmq.msgid import new_uniq_id
from rocksidecar.rmq.pool import RemotingClient
from rocksidecar.rmq.protocol.frame import RemotingCommand
from rocksidecar.rmq.result import PullResult
from tests.rmq.consumer.helpers import FailingClient, Recorder, start, wired

TOPIC = "InflateT"
LIMIT = 64 * 1024
ZLIB = SYSFLAG_COMPRESSED | SYSFLAG_COMPRESSION_ZLIB
BOMB = zlib.compress(b"\0" * (LIMIT * 200), 9)  # 12.8 MiB from ~13 KB
start_ = functools.partial(start, topic=TOPIC)


def config(group: str, **kw: object) -> ConsumerConfig:
    kw.setdefault("consume_from", ConsumeFrom.FIRST_OFFSET)
    kw.setdefault("max_body_bytes", LIMIT)
    return ConsumerConfig(group, instance_name="one", client_ip="127.0.0.1", **kw)  # type: ignore[arg-type]


async def send_raw(
    cluster: DevCluster, body: bytes, sys_flag: int = 0, props: str | None = None, *, topic: str = TOPIC
) -> str:
    """One record to broker-a queue 0 with the sysflag and body as given: what any producer can send."""
    broker = cluster.brokers["broker-a"]
    client = RemotingClient()
    try:
        api = BrokerApi(client)
        key = new_uniq_id()
        wire = props if props is not None else Message(topic, b"-").wire_properties(key)
        header = api._send_header(
            MessageQueue(topic, "broker-a", 0), sys_flag, 0, wire, batch=False, default_topic="TBW102"
        )
        resp = await client.invoke(
            broker.addr, RemotingCommand(RequestCode.SEND_MESSAGE_V2, header, body), 3.0
        )
        assert resp.code == 0, resp.remark
    finally:
        await client.close()
    return key


async def poisoned_queue(cluster: DevCluster) -> list[bytes]:
    """good, zlib bomb, good (compressed), corrupt lz4, corrupt zstd, good; the good bodies in order."""
    await send_raw(cluster, b"good-0")
    await send_raw(cluster, BOMB, ZLIB)
    await send_raw(cluster, zlib.compress(b"good-2" * 1000), ZLIB)
    await send_raw(cluster, b"\x04\x22\x4d\x18garbage", SYSFLAG_COMPRESSED | SYSFLAG_COMPRESSION_LZ4)
    await send_raw(
        cluster,
        zstandard.ZstdCompressor().compress(b"x" * 9000)[:-4],
        SYSFLAG_COMPRESSED | SYSFLAG_COMPRESSION_ZSTD,
    )
    await send_raw(cluster, b"good-5")
    return [b"good-0", b"good-2" * 1000, b"good-5"]


def dlq(cluster: DevCluster, group: str) -> list[tuple[bytes, int]]:
    dead = cluster.brokers["broker-a"].messages(f"%DLQ%{group}", inflate=False)
    return [(m.body, m.sys_flag & 0xFFF) for m in dead]


async def test_good_messages_around_undecodable_ones_are_delivered_and_the_bad_go_to_the_dlq(
    cluster: DevCluster, consumers: list[PushConsumer], caplog: pytest.LogCaptureFixture
) -> None:
    good = await poisoned_queue(cluster)
    rec = Recorder()
    with caplog.at_level(logging.ERROR, "rocksidecar.rmq.consumer.push_consumer"):
        consumer = await start_(consumers, cluster, config("G-bad"), rec)
        await rec.until(lambda got: len(got) >= len(good))
        await consumer.stats.reach("undecodable_dead_lettered", 3)
    assert [m.body for m in rec.got] == good
    assert consumer.stats["undecodable"] == 3
    assert consumer.stats["pull_errors"] == 0  # before: every pull from offset 1 failed, for ever
    # the DLQ holds the records as the broker stored them: compressed bodies, COMPRESSED sysflag
    assert sorted(dlq(cluster, "G-bad")) == sorted(
        [
            (BOMB, ZLIB),
            (b"\x04\x22\x4d\x18garbage", SYSFLAG_COMPRESSED | SYSFLAG_COMPRESSION_LZ4),
            (
                zstandard.ZstdCompressor().compress(b"x" * 9000)[:-4],
                SYSFLAG_COMPRESSED | SYSFLAG_COMPRESSION_ZSTD,
            ),
        ]
    )
    lines = [r.getMessage() for r in caplog.records if "cannot be decoded" in r.getMessage()]
    assert len(lines) == 3
    assert f"at {TOPIC}@broker-a:0 offset 1 " in lines[0]
    assert "%DLQ%G-bad" in lines[0] and "limit" in lines[0]
    await consumer.close()
    assert cluster.brokers["broker-a"].offsets.query("G-bad", TOPIC, 0) == 6  # past all six


async def test_a_failed_send_back_holds_the_queue_at_the_bad_message_until_it_succeeds(
    cluster: DevCluster, consumers: list[PushConsumer]
) -> None:
    await send_raw(cluster, b"before")
    await send_raw(cluster, BOMB, ZLIB)
    await send_raw(cluster, b"after")
    client = FailingClient({RequestCode.CONSUMER_SEND_MSG_BACK: 2})
    rec = Recorder()
    consumer = PushConsumer(
        config("G-hold", pull_delay_on_error_s=0.01), cluster.namesrv_addr, rec, client=client
    )
    wired(consumer, client)
    consumer.subscribe(TOPIC)
    consumers.append(consumer)
    await consumer.start()
    await consumer.stats.reach("undecodable_dead_lettered", 1)
    await rec.until(lambda got: len(got) >= 2)
    assert [m.body for m in rec.got] == [b"before", b"after"]  # each once: nothing skipped or repeated
    assert consumer.stats["send_back_failed"] == 2
    assert consumer.stats["undecodable"] == 1  # logged and counted once, though pulled three times
    assert client.codes.count(RequestCode.CONSUMER_SEND_MSG_BACK) == 3
    assert dlq(cluster, "G-hold") == [(BOMB, ZLIB)]


async def test_broadcasting_drops_it_counted_and_goes_on(
    cluster: DevCluster, consumers: list[PushConsumer], tmp_path: Path
) -> None:
    await send_raw(cluster, BOMB, ZLIB)
    await send_raw(cluster, b"after")
    rec = Recorder()
    consumer = await start_(
        consumers,
        cluster,
        config("G-bcast", message_model=MessageModel.BROADCASTING, offsets_dir=tmp_path),
        rec,
    )
    await rec.until(lambda got: len(got) >= 1)
    assert [m.body for m in rec.got] == [b"after"]
    assert consumer.stats["undecodable"] == 1
    assert consumer.stats["undecodable_dead_lettered"] == 0
    assert dlq(cluster, "G-bcast") == []


async def test_orderly_consumption_goes_on_past_it(
    cluster: DevCluster, consumers: list[PushConsumer]
) -> None:
    await send_raw(cluster, b"one")
    await send_raw(cluster, b"\x00bad", SYSFLAG_COMPRESSED | SYSFLAG_COMPRESSION_LZ4)
    await send_raw(cluster, b"three")
    rec = Recorder()
    consumer = await start_(consumers, cluster, config("G-ord", orderly=True), rec)
    await rec.until(lambda got: len(got) >= 2)
    assert [m.body for m in rec.got] == [b"one", b"three"]
    await consumer.stats.reach("undecodable_dead_lettered", 1)


async def test_a_record_corrupt_even_alone_is_skipped_with_an_error(
    cluster: DevCluster, consumers: list[PushConsumer], caplog: pytest.LogCaptureFixture
) -> None:
    """devbroker frames every record soundly, so the pull's answer for offset 0 is made up: what
    BrokerApi.pull returns when the record there is corrupt even when fetched alone."""
    await send_raw(cluster, b"lost")
    await send_raw(cluster, b"after")
    rec = Recorder()
    consumer = PushConsumer(config("G-frame"), cluster.namesrv_addr, rec)
    real_pull = consumer.api.pull

    async def pull(addr: str, group: str, mq: MessageQueue, offset: int, **kw: Any) -> PullResult:
        result = await real_pull(addr, group, mq, offset, **kw)
        if mq == MessageQueue(TOPIC, "broker-a", 0) and offset == 0:
            return dataclasses.replace(result, messages=[], next_begin_offset=1, corrupt="bad frame")
        return result

    consumer.api.pull = pull  # type: ignore[method-assign]
    consumer.subscribe(TOPIC)
    consumers.append(consumer)
    with caplog.at_level(logging.ERROR, "rocksidecar.rmq.consumer.push_consumer"):
        await consumer.start()
        await rec.until(lambda got: len(got) >= 1)
    assert [m.body for m in rec.got] == [b"after"]
    assert consumer.stats["corrupt_skipped"] == 1
    [line] = [r.getMessage() for r in caplog.records if "corrupt" in r.getMessage()]
    assert f"{TOPIC}@broker-a:0 offsets 0 to 0 skipped" in line and "bad frame" in line
