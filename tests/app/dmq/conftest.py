"""A devbroker, a running DmqService on it, and a consumer of the real topic; the delay store harness
(tests.delay.conftest) as the fixture ``h``."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from rocksidecar.app.config import Settings
from rocksidecar.app.dmq import inner
from rocksidecar.app.dmq.options import DmqOptions
from rocksidecar.app.dmq.service import DmqService
from rocksidecar.devbroker import DevCluster
from rocksidecar.retry.policy import RetryPolicy
from rocksidecar.rmq import BrokerApi, NameServerClient, RemotingClient
from rocksidecar.rmq.consumer import ConsumeFrom, ConsumerConfig, ConsumeStatus, PushConsumer
from rocksidecar.rmq.message import Message, MessageExt, MessageQueue
from rocksidecar.rmq.producer import Producer, ProducerConfig
from tests.delay.conftest import h  # noqa: F401 - the delay store harness, for the scheduler's hooks here

WAIT_S = 15.0
WARMUP = "warmup"
REAL_TOPIC = "dmq_real_topic"
INNER_TOPIC = "dmq_test_inner"


def dmq_settings(namesrv: str, data_dir: Path) -> Settings:
    return Settings(
        namesrv=(namesrv,),
        data_dir=str(data_dir),
        retry_default=RetryPolicy((0.05, 0.1, 0.2), 1000),
        send_timeout_ms=1000,
    )


@dataclass
class Received:
    """What the real topic's consumer got."""

    got: list[MessageExt] = field(default_factory=list)
    changed: asyncio.Event = field(default_factory=asyncio.Event)

    async def __call__(self, msgs: Sequence[MessageExt], _mq: MessageQueue) -> ConsumeStatus:
        self.got.extend(m for m in msgs if m.tags != WARMUP)
        self.changed.set()
        return ConsumeStatus.SUCCESS

    async def until(self, done: Callable[[list[MessageExt]], bool], timeout_s: float = WAIT_S) -> None:
        async with asyncio.timeout(timeout_s):
            while not done(self.got):
                self.changed.clear()
                await self.changed.wait()

    def ids(self) -> list[str]:
        return [m.uniq_key or "" for m in self.got]


@dataclass
class DmqStack:
    cluster: DevCluster
    service: DmqService
    received: Received


async def create_topics(cluster: DevCluster, *topics: str) -> None:
    """devbroker creates a topic on its first message: send one, so the consumers find routes at start
    (without, they wait for the 20 s rebalance). Inner topics get a cancel of nothing (a no-op)."""
    client = RemotingClient()
    producer = Producer(NameServerClient(client, cluster.namesrv_addr), BrokerApi(client), ProducerConfig())
    await producer.start()
    try:
        for topic in topics:
            if topic == REAL_TOPIC:
                await producer.send(Message(topic, b"warm", tags=WARMUP))
            else:
                await producer.send(inner.cancel_message("nothing", inner_topic=topic))
    finally:
        await producer.close()
        await client.close()


@pytest.fixture
async def cluster() -> AsyncIterator[DevCluster]:
    async with DevCluster(brokers=2, queues=4) as c:
        await create_topics(c, REAL_TOPIC, INNER_TOPIC)
        yield c


async def real_consumer(cluster: DevCluster, received: Received, group: str) -> PushConsumer:
    consumer = PushConsumer(
        ConsumerConfig(group=group, consume_from=ConsumeFrom.FIRST_OFFSET), cluster.namesrv_addr, received
    )
    consumer.subscribe(REAL_TOPIC)
    await consumer.start()
    return consumer


@pytest.fixture
async def stack(cluster: DevCluster, tmp_path: Path) -> AsyncIterator[DmqStack]:
    options = DmqOptions(inner_topic=INNER_TOPIC, group="dmq_test_group", http_addr="127.0.0.1:0")
    service = DmqService(dmq_settings(cluster.namesrv_addr, tmp_path / "dmq"), options)
    await service.start()
    received = Received()
    consumer = await real_consumer(cluster, received, "dmq_real_reader")
    try:
        yield DmqStack(cluster, service, received)
    finally:
        await consumer.close()
        await service.stop()
