"""Subscriptions.close stops every subscription at once: each consumer stops pulling at its close's first
step, then waits for what its app holds. One after another (before), the others kept delivering new
messages after SIGTERM while the first waited, and N subscriptions took N waits of close_timeout_s, past
the grace Service.stop has (what came after them was never closed)."""

from __future__ import annotations

import asyncio
from collections.abc import Sequence

from rocksidecar.app.subscriptions.runner import Subscriptions
from rocksidecar.app.subscriptions.spec import SubscriptionSpec
from rocksidecar.devbroker import DevCluster
from rocksidecar.rmq.consumer.config import ConsumeStatus
from rocksidecar.rmq.message import MessageExt, MessageQueue
from tests.rmq.consumer.helpers import send_to_queues

TOPICS = ("CloseA", "CloseB", "CloseC")


class Holds:
    """An app that holds every delivery until ``release`` is set."""

    def __init__(self) -> None:
        self.release = asyncio.Event()
        self.got = asyncio.Event()

    async def __call__(self, msgs: Sequence[MessageExt], mq: MessageQueue) -> ConsumeStatus:
        self.got.set()
        await self.release.wait()
        return ConsumeStatus.SUCCESS


async def test_closing_stops_every_subscription_before_waiting_for_any(cluster: DevCluster) -> None:
    for broker in cluster.brokers.values():
        for topic in TOPICS:
            broker.topics.ensure(topic, 4)
    specs = [
        SubscriptionSpec(
            name=t, topic=t, group=f"g-{t}", endpoint="http://127.0.0.1:9/x", consume_from="first"
        )
        for t in TOPICS
    ]
    subs = Subscriptions(specs, cluster.namesrv_addr)
    apps = {}
    for name, consumer in subs.consumers.items():
        consumer.config.close_timeout_s = 30.0  # longer than this test waits: the old order hung here
        apps[name] = consumer.listener = Holds()
    await subs.start()
    for topic in TOPICS:
        await send_to_queues(cluster, topic, 1, queues=1)
    async with asyncio.timeout(10):
        await asyncio.gather(*(app.got.wait() for app in apps.values()))  # each app holds a message
    closing = asyncio.create_task(subs.close())
    try:
        async with asyncio.timeout(5):  # every consumer stops pulling at once, while the apps still hold
            await asyncio.gather(*(c._closing.wait() for c in subs.consumers.values()))
        assert all(c.closing for c in subs.consumers.values()) and not closing.done()
    finally:
        for app in apps.values():
            app.release.set()
        async with asyncio.timeout(10):
            await closing
