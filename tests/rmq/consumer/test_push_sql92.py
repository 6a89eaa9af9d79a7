"""SQL92 subscriptions end to end on devbroker: only the matching messages are delivered, the
subscription travels as Java's (heartbeat expressionType, pull header), and a broker without
enablePropertyFilter (or an expression it cannot parse) stops the consumer's start with a clear error."""

from __future__ import annotations

import asyncio

import orjson
import pytest

from rocksidecar.devbroker import DevCluster
from rocksidecar.rmq.broker import BrokerApi
from rocksidecar.rmq.codes import RequestCode
from rocksidecar.rmq.consumer.config import ConsumeFrom, ConsumerConfig
from rocksidecar.rmq.consumer.push_consumer import PushConsumer
from rocksidecar.rmq.errors import ClientError
from rocksidecar.rmq.message import Message, MessageQueue
from rocksidecar.rmq.msgid import new_uniq_id
from rocksidecar.rmq.pool import RemotingClient
from rocksidecar.rmq.protocol.frame import RemotingCommand
from tests.rmq.consumer.helpers import WAIT_S, Recorder

TOPIC = "SqlT"


def config(group: str) -> ConsumerConfig:
    return ConsumerConfig(
        group, instance_name="sql", client_ip="127.0.0.1", consume_from=ConsumeFrom.FIRST_OFFSET
    )


async def send_numbered(cluster: DevCluster, n: int) -> dict[str, int]:
    """``n`` messages with property a = i (and TAGS A or B by parity) over every queue; key -> i."""
    client = RemotingClient()
    api = BrokerApi(client)
    sent: dict[str, int] = {}
    try:
        brokers = sorted(cluster.brokers.items())
        for i in range(n):
            name, broker = brokers[i % len(brokers)]
            key = new_uniq_id()
            msg = Message(TOPIC, str(i).encode(), tags="A" if i % 2 else "B", properties={"a": str(i)})
            await api.send(broker.addr, MessageQueue(TOPIC, name, i % 4), msg, key, 3.0)
            sent[key] = i
    finally:
        await client.close()
    return sent


def enable(cluster: DevCluster, on: bool = True) -> None:
    for broker in cluster.brokers.values():
        broker.property_filter.enabled = on


class Recording(RemotingClient):
    """Keeps every request sent, to look at what the consumer put on the wire."""

    def __init__(self) -> None:
        super().__init__()
        self.sent: list[RemotingCommand] = []

    async def invoke(self, addr: str, cmd: RemotingCommand, timeout_s: float) -> RemotingCommand:
        self.sent.append(cmd)
        return await super().invoke(addr, cmd, timeout_s)


async def test_only_matching_messages_are_delivered(
    cluster: DevCluster, consumers: list[PushConsumer]
) -> None:
    enable(cluster)
    sent = await send_numbered(cluster, 40)
    wanted = {k for k, i in sent.items() if 10 <= i <= 30 and i % 2}  # TAGS A = odd
    rec = Recorder()
    client = Recording()
    consumer = PushConsumer(config("G-sql"), cluster.namesrv_addr, rec, client=client)
    client._on_request = consumer.on_broker_request
    consumer.subscribe(TOPIC, "a BETWEEN 10 AND 30 AND TAGS = 'A'", "SQL92")
    consumers.append(consumer)
    await consumer.start()
    await rec.until(lambda got: len(got) >= len(wanted))
    # Every queue pulled to its end (the filter skipped the rest): nothing else can still arrive.
    ends = {
        MessageQueue(TOPIC, n, q): b.store.max_offset(TOPIC, q)
        for n, b in cluster.brokers.items()
        for q in range(4)
    }
    async with asyncio.timeout(WAIT_S):
        while any(consumer.queues[mq].pq.next_offset < end for mq, end in ends.items()):
            await consumer.stats.reach("pulls", consumer.stats["pulls"] + 1)
    assert set(rec.keys()) == wanted and len(rec.got) == len(wanted)
    beats = [orjson.loads(c.body) for c in client.sent if c.code == RequestCode.HEART_BEAT]
    subs = [s for b in beats for d in b["consumerDataSet"] for s in d["subscriptionDataSet"]]
    mine = [s for s in subs if s["topic"] == TOPIC]
    assert mine and all(s["expressionType"] == "SQL92" and s["tagsSet"] == [] for s in mine)
    pulls = [c.ext_fields for c in client.sent if c.code == RequestCode.PULL_MESSAGE]
    assert {p["expressionType"] for p in pulls if p["topic"] == TOPIC} == {"SQL92"}
    assert any(c.code == RequestCode.CHECK_CLIENT_CONFIG for c in client.sent)


async def test_a_broker_without_the_property_filter_fails_the_start_clearly(
    cluster: DevCluster, consumers: list[PushConsumer]
) -> None:
    await send_numbered(cluster, 2)  # the topic exists, so the brokers are asked
    consumer = PushConsumer(config("G-nosql"), cluster.namesrv_addr, Recorder())
    consumer.subscribe(TOPIC, "a > 1", "SQL92")
    consumers.append(consumer)
    with pytest.raises(ClientError, match="does not support consumer to filter message by SQL92"):
        await consumer.start()
    assert not consumer.started
    for broker in cluster.brokers.values():
        assert broker.clients.consumer_ids("G-nosql") == []  # it never joined the group


async def test_an_expression_the_broker_cannot_parse_fails_the_start(
    cluster: DevCluster, consumers: list[PushConsumer]
) -> None:
    enable(cluster)
    await send_numbered(cluster, 2)
    consumer = PushConsumer(config("G-badsql"), cluster.namesrv_addr, Recorder())
    consumer.subscribe(TOPIC, "a >", "SQL92")
    consumers.append(consumer)
    with pytest.raises(ClientError, match=r"SUBSCRIPTION_PARSE_FAILED.*a >|a >.*SUBSCRIPTION_PARSE_FAILED"):
        await consumer.start()


def test_bad_expression_types_are_refused_at_subscribe() -> None:
    consumer = PushConsumer(config("G-x"), "127.0.0.1:1", Recorder())
    with pytest.raises(ValueError, match="expression type must be one of TAG, SQL92"):
        consumer.subscribe(TOPIC, "a > 1", "XPATH")
    with pytest.raises(ValueError, match="SQL92 expression cannot be empty"):
        consumer.subscribe(TOPIC, " ", "SQL92")
