"""Topics for the read source's tests: created on devbroker's brokers with a given number of queues, and
messages put into chosen queues with the RocketMQ client (so each test knows every offset)."""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from dataclasses import dataclass

import httpx

from bench.common import DevbrokerProcess
from rocksidecar.rmq import BrokerApi, Message, MessageQueue, RemotingClient, new_uniq_id


@dataclass(frozen=True)
class Put:
    broker: str
    queue_id: int
    body: bytes
    tags: str | None = None
    keys: tuple[str, ...] = ()
    properties: tuple[tuple[str, str], ...] = ()


def brokers(devbroker: DevbrokerProcess) -> dict[str, str]:
    """broker name -> address."""
    doc = httpx.get(f"{devbroker.admin_url}/brokers", timeout=10).json()
    return {b["name"]: b["addr"] for b in doc}


def create(devbroker: DevbrokerProcess, topic: str, queues: int) -> None:
    """Create (or grow) ``topic`` with ``queues`` queues on every broker."""

    async def go() -> None:
        client = RemotingClient()
        try:
            api = BrokerApi(client)
            for addr in brokers(devbroker).values():
                await api.create_topic(addr, topic, read_queue_nums=queues, write_queue_nums=queues)
        finally:
            await client.close()

    asyncio.run(go())


def put(devbroker: DevbrokerProcess, topic: str, messages: Sequence[Put]) -> list[str]:
    """Send each message to its queue, in order; returns their uniq keys."""
    addrs = brokers(devbroker)

    async def go() -> list[str]:
        client = RemotingClient()
        try:
            api = BrokerApi(client)
            ids = []
            for p in messages:
                uniq = new_uniq_id()
                msg = Message(topic, p.body, tags=p.tags, keys=p.keys, properties=dict(p.properties))
                await api.send(addrs[p.broker], MessageQueue(topic, p.broker, p.queue_id), msg, uniq, 10.0)
                ids.append(uniq)
            return ids
        finally:
            await client.close()

    return asyncio.run(go())
