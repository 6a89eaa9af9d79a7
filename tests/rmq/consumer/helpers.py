"""Shared pieces of the push consumer tests on devbroker."""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

from rocksidecar.devbroker import DevCluster
from rocksidecar.rmq.broker import BrokerApi
from rocksidecar.rmq.consumer.config import ConsumeFrom, ConsumerConfig, ConsumeStatus, MessageListener
from rocksidecar.rmq.consumer.push_consumer import PushConsumer
from rocksidecar.rmq.errors import ConnectionClosed
from rocksidecar.rmq.message import Message, MessageExt, MessageQueue
from rocksidecar.rmq.msgid import new_uniq_id
from rocksidecar.rmq.pool import RemotingClient
from rocksidecar.rmq.protocol.frame import RemotingCommand

WAIT_S = 10.0  # generous bound on "eventually"; the tests finish far sooner


async def send_to_queues(
    cluster: DevCluster, topic: str, per_queue: int, *, tags: str | None = None, queues: int = 4
) -> list[str]:
    """``per_queue`` messages to each queue of every broker; returns their UNIQ_KEYs in send order."""
    client = RemotingClient()
    api = BrokerApi(client)
    keys = []
    try:
        for name, broker in sorted(cluster.brokers.items()):
            for q in range(queues):
                for i in range(per_queue):
                    key = new_uniq_id()
                    msg = Message(topic, f"{name}/{q}/{i}".encode(), tags=tags)
                    await api.send(broker.addr, MessageQueue(topic, name, q), msg, key, 3.0)
                    keys.append(key)
    finally:
        await client.close()
    return keys


@dataclass
class Recorder:
    """A listener that records what it got and answers ``decide``'s status (SUCCESS by default)."""

    decide: Callable[[MessageExt], ConsumeStatus] = lambda m: ConsumeStatus.SUCCESS
    got: list[MessageExt] = field(default_factory=list)
    changed: asyncio.Event = field(default_factory=asyncio.Event)

    async def __call__(self, msgs: Sequence[MessageExt], mq: MessageQueue) -> ConsumeStatus:
        self.got.extend(msgs)
        self.changed.set()
        statuses = {self.decide(m) for m in msgs}
        return ConsumeStatus.SUCCESS if statuses == {ConsumeStatus.SUCCESS} else statuses.pop()

    async def until(self, done: Callable[[list[MessageExt]], bool]) -> None:
        async with asyncio.timeout(WAIT_S):
            while not done(self.got):
                self.changed.clear()
                await self.changed.wait()

    def keys(self) -> list[str]:
        return [m.uniq_key or "" for m in self.got]


def orderly_config(group: str, **kw: object) -> ConsumerConfig:
    """An orderly member "one" from the first offset, trying a suspended message again after 10 ms."""
    kw.setdefault("suspend_orderly_s", 0.01)
    return ConsumerConfig(
        group,
        instance_name="one",
        client_ip="127.0.0.1",
        orderly=True,
        consume_from=ConsumeFrom.FIRST_OFFSET,
        **kw,  # type: ignore[arg-type]
    )


async def settle(consumer: PushConsumer, done: Callable[[], bool]) -> None:
    """Wait for rebalances until ``done`` (driven by the brokers' notifications; the 20 s timer never
    fires within a test)."""
    async with asyncio.timeout(WAIT_S):
        while not done():
            await consumer.stats.reach("rebalances_done", consumer.stats["rebalances_done"] + 1)


def owned(consumer: PushConsumer, topic: str) -> set[MessageQueue]:
    return {mq for mq in consumer.queues if mq.topic == topic}


async def start(
    made: list[PushConsumer],
    cluster: DevCluster,
    cfg: ConsumerConfig,
    listener: MessageListener,
    expression: str = "*",
    *,
    topic: str,
    client: RemotingClient | None = None,
) -> PushConsumer:
    consumer = PushConsumer(cfg, cluster.namesrv_addr, listener, client=client)
    consumer.subscribe(topic, expression)
    made.append(consumer)
    await consumer.start()
    return consumer


class FailingClient(RemotingClient):
    """Records every request's code and fails the next ``fail[code]`` requests of a code with a lost
    connection, as a broker that is briefly unreachable."""

    def __init__(self, fail: dict[int, int] | None = None) -> None:
        super().__init__()
        self.fail = dict(fail or {})
        self.codes: list[int] = []

    async def invoke(self, addr: str, cmd: RemotingCommand, timeout_s: float) -> RemotingCommand:
        self.codes.append(cmd.code)
        if self.fail.get(cmd.code, 0) > 0:
            self.fail[cmd.code] -= 1
            raise ConnectionClosed(f"injected: request {cmd.code} lost", addr=addr)
        return await super().invoke(addr, cmd, timeout_s)


def wired(consumer: PushConsumer, client: FailingClient) -> PushConsumer:
    """Route the brokers' requests (NOTIFY_CONSUMER_IDS_CHANGED) on ``client`` to ``consumer``."""
    client._on_request = consumer.on_broker_request
    return consumer


class BlockingListener:
    """Orderly listener: records the offsets it got and the most calls running at once; the first call on
    offset ``block_at`` waits for ``release`` (a slow listener: a call busy while the test acts)."""

    def __init__(self, block_at: int) -> None:
        self.block_at = block_at
        self.blocked = asyncio.Event()
        self.release = asyncio.Event()
        self.running = 0
        self.most = 0
        self.offsets: list[int] = []
        self.changed = asyncio.Event()

    async def __call__(self, msgs: Sequence[MessageExt], mq: MessageQueue) -> ConsumeStatus:
        self.running += 1
        self.most = max(self.most, self.running)
        try:
            self.offsets.extend(m.queue_offset for m in msgs)
            self.changed.set()
            if msgs[0].queue_offset == self.block_at and not self.blocked.is_set():
                self.blocked.set()
                await self.release.wait()
            return ConsumeStatus.SUCCESS
        finally:
            self.running -= 1

    async def until(self, done: Callable[[], bool]) -> None:
        async with asyncio.timeout(WAIT_S):
            while not done():
                self.changed.clear()
                await self.changed.wait()
