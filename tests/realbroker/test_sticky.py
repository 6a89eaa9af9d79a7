"""Sticky allocation on real RocketMQ 4.9.4 (issue 13): the brokers forward GET_CONSUMER_RUNNING_INFO
to our consumers, so four of them in a group read each other's queues; when one leaves, exactly its 6
of 24 queues change owner and the rest end 8/8/8. ``mqadmin consumerStatus`` prints our client's
queues from the same answer. Skipped unless ROCKSIDECAR_TEST_NAMESRV is set (see conftest.py)."""

from __future__ import annotations

import asyncio
import os
from collections import Counter
from pathlib import Path

from rocksidecar.rmq import BrokerApi, NameServerClient, RemotingClient
from rocksidecar.rmq.consumer import ConsumeFrom, ConsumerConfig, PushConsumer
from rocksidecar.rmq.consumer.sticky import AllocateSticky
from tests.realbroker.conftest import create_topic_everywhere, unique_topic
from tests.rmq.consumer import conftest as consumer_fixtures
from tests.rmq.consumer.helpers import Recorder, owned
from tests.rmq.consumer.sticky_helpers import owners, settle_all

WAIT_S = 60.0
consumers = consumer_fixtures.consumers  # the fixture: members are closed after each test


async def _group(
    made: list[PushConsumer], namesrv_addr: str, client: RemotingClient, prefix: str, n: int, queues: int
) -> tuple[str, str, list[PushConsumer]]:
    ns = NameServerClient(client, namesrv_addr)
    topic = unique_topic(prefix)
    await create_topic_everywhere(ns, BrokerApi(client), topic, queues=queues)
    group = f"rs_sticky_{os.getpid()}_{topic[-8:]}"
    members = []
    for i in range(n):
        cfg = ConsumerConfig(
            group,
            instance_name=f"st{i}-{os.getpid()}",
            consume_from=ConsumeFrom.FIRST_OFFSET,
            allocate=AllocateSticky(timeout_s=5.0),
        )
        consumer = PushConsumer(cfg, namesrv_addr, Recorder())
        consumer.subscribe(topic)
        made.append(consumer)
        await consumer.start()
        members.append(consumer)
    return topic, group, members


async def test_a_departure_moves_exactly_the_leavers_queues(
    namesrv_addr: str, client: RemotingClient, consumers: list[PushConsumer]
) -> None:
    topic, _, members = await _group(consumers, namesrv_addr, client, "RsSticky", 4, 12)  # 24 queues
    async with asyncio.timeout(WAIT_S):
        await settle_all(members, topic, 24)
    before = {mq: ids[0] for mq, ids in owners(members, topic).items()}
    leaver = sorted(members, key=lambda m: m.client_id)[1]
    rest = [m for m in members if m is not leaver]
    added = {m.client_id: m.stats[f"queues_added:{topic}"] for m in rest}
    await leaver.close()
    async with asyncio.timeout(WAIT_S):
        for m in rest:  # the brokers' notification of the departure
            await m.stats.reach("rebalances_done", m.stats["rebalances_done"] + 1)
        await settle_all(rest, topic, 24)
    after = {mq: ids[0] for mq, ids in owners(rest, topic).items()}
    assert sorted(Counter(after.values()).values()) == [8, 8, 8]
    assert sum(1 for mq in after if after[mq] != before[mq]) == 6
    assert sum(m.stats[f"queues_added:{topic}"] - added[m.client_id] for m in rest) == 6


async def test_mqadmin_consumer_status_prints_our_queues(
    namesrv_addr: str, broker_ctl: Path, client: RemotingClient, consumers: list[PushConsumer]
) -> None:
    topic, group, (consumer,) = await _group(consumers, namesrv_addr, client, "RsStickyAdmin", 1, 2)
    proc = await asyncio.create_subprocess_exec(
        str(broker_ctl),
        "java",
        "org.apache.rocketmq.tools.command.MQAdminStartup",
        "consumerStatus",
        "-n",
        namesrv_addr,
        "-g",
        group,
        "-i",
        consumer.client_id,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.STDOUT,
    )
    async with asyncio.timeout(WAIT_S):
        out, _ = await proc.communicate()
    text = out.decode(errors="replace")
    rows = {
        (parts[0], parts[1], int(parts[2]))
        for line in text.splitlines()
        if "ProcessQueueInfo [" in line and len(parts := line.split()) > 3
    }
    mine = {(mq.topic, mq.broker_name, mq.queue_id) for mq in owned(consumer, topic)}
    assert len(mine) == 4 and mine <= rows, text[-2000:]
    assert "STICKY" in text and "CONSUME_PASSIVELY" in text, text[-2000:]
