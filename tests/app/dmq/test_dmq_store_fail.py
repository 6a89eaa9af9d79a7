"""A store that refuses writes for a while (a full disk refuses new schedules until twice the reserve is
free: that can last hours) must not cost inner messages: the DMQ's consumer retries the batch here for
as long as it takes, the queue held so the offset cannot pass it. Before, a replicated (broadcasting)
replica dropped the message after max_reconsume_times and committed its offset (never stored, never read
again), and a clustering one sent it back until the broker dead-lettered it."""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from rocksidecar.app.dmq import inner
from rocksidecar.app.dmq.options import DmqOptions
from rocksidecar.app.dmq.service import DmqService
from rocksidecar.app.wiring import COLUMN_FAMILIES
from rocksidecar.delay import DelayState
from rocksidecar.devbroker import DevCluster
from rocksidecar.rmq import BrokerApi, NameServerClient, RemotingClient
from rocksidecar.rmq.consumer import ConsumeStatus, MessageListener
from rocksidecar.rmq.consumer.config import ListenerResult
from rocksidecar.rmq.consumer.offset_store import ReadType
from rocksidecar.rmq.message import Message, MessageExt, MessageQueue
from rocksidecar.rmq.producer import Producer, ProducerConfig
from rocksidecar.storage.memory import MemoryKV
from tests.fakes import FaultyKV

from .conftest import INNER_TOPIC, REAL_TOPIC, WAIT_S, dmq_settings

GROUP = "dmq_store_fail_group"
Call = tuple[str, int, ListenerResult | None]  # (UNIQ_KEY, reconsume times, status; None: it raised)


@dataclass
class Attempts:
    """The DMQ consumer's listener, recording each message it was called with and how the call ended."""

    listener: MessageListener
    calls: list[Call] = field(default_factory=list)
    changed: asyncio.Event = field(default_factory=asyncio.Event)

    async def __call__(self, batch: Sequence[MessageExt], mq: MessageQueue) -> ListenerResult:
        status: ListenerResult | None = None
        try:
            status = await self.listener(batch, mq)
            return status
        finally:
            self.calls.extend((m.uniq_key or "", m.reconsume_times, status) for m in batch)
            self.changed.set()

    async def until(self, done: Callable[[list[Call]], bool]) -> None:
        async with asyncio.timeout(WAIT_S):
            while not done(self.calls):
                self.changed.clear()
                await self.changed.wait()


@pytest.mark.parametrize("replicas", ["r0", None], ids=["replicated", "clustering"])
async def test_an_inner_message_the_store_refuses_is_retried_until_stored_never_given_up(
    cluster: DevCluster, tmp_path: Path, replicas: str | None
) -> None:
    kv = FaultyKV(MemoryKV(COLUMN_FAMILIES))
    options = DmqOptions(
        inner_topic=INNER_TOPIC, group=GROUP, http_addr="127.0.0.1:0", replicas=replicas, instance_name="r0"
    )
    service = DmqService(dmq_settings(cluster.namesrv_addr, tmp_path / "dmq"), options, kv=kv)
    cfg = service.consumer.config
    cfg.send_back_retry_s = 0.01  # 5 s in production; only the pace changes
    cfg.max_reconsume_times = 1  # where the consumer gave up before (16 in production): passed here
    attempts = Attempts(service.consumer.listener)
    service.consumer.listener = attempts
    await service.start()
    client = RemotingClient()
    producer = Producer(NameServerClient(client, cluster.namesrv_addr), BrokerApi(client), ProducerConfig())
    await producer.start()
    try:
        kv.write_fault = "disk full"
        real = Message(REAL_TOPIC, b"precious", id="STOREFAIL0000000000000000000001")
        id_ = real.id or ""
        due = service.delay.now_ms() + 60_000
        res = await producer.send(inner.inner_message(real, due, inner_topic=INNER_TOPIC), sharding_key=id_)
        # well past max_reconsume_times, and still failing: held, not dropped nor sent back
        await attempts.until(lambda calls: any(i == id_ and n >= 4 for i, n, _ in calls))
        assert service.delay.get(id_) is None
        held = await service.consumer.offsets.read(res.queue, ReadType.MEMORY)
        assert held is None or held <= res.queue_offset, f"offset {held} passed {res.queue_offset}"
        assert service.consumer.stats["sent_back"] == 0
        assert all(not b.messages(f"%DLQ%{GROUP}") for b in cluster.brokers.values())

        kv.write_fault = None  # the disk has room again
        await attempts.until(lambda calls: any(i == id_ and s is ConsumeStatus.SUCCESS for i, _, s in calls))
        stored = service.delay.get(id_)
        assert stored is not None and stored.state is DelayState.SCHEDULED
        at = await service.consumer.offsets.read(res.queue, ReadType.MEMORY)
        assert at is not None and at > res.queue_offset
        tries = [n for i, n, _ in attempts.calls if i == id_]
        assert tries == list(range(len(tries)))  # one attempt after another, the last one stored it
    finally:
        await producer.close()
        await client.close()
        await service.stop()
