"""A sidecar subscription with expression_type SQL92 on devbroker: only the messages whose properties
match reach the app; brokers without enablePropertyFilter stop the sidecar's start with one clear line."""

from __future__ import annotations

import base64
from pathlib import Path

import httpx
import pytest

from rocksidecar.app.service import COLUMN_FAMILIES, Service, StartupError
from rocksidecar.app.subscriptions.spec import SubscriptionSpec
from rocksidecar.devbroker import DevCluster
from rocksidecar.storage.rocks import RocksKV
from tests.app.conftest import settings_for
from tests.app.push_app import push_app

TOPIC = "SqlOrders"


def service_for(tmp_path: Path, cluster: DevCluster, url: str) -> Service:
    sub = SubscriptionSpec(
        name="orders",
        topic=TOPIC,
        group="g-sql",
        endpoint=url,
        consume_from="first",
        expression="amount > 100 AND region IN ('eu')",
        expression_type="SQL92",
    )
    settings = settings_for(tmp_path, namesrv=(cluster.namesrv_addr,), subscriptions=(sub,))
    (tmp_path / "data").mkdir(exist_ok=True)
    return Service(settings, kv=RocksKV.open(tmp_path / "data" / "store", COLUMN_FAMILIES))


async def test_only_matching_messages_reach_the_app(tmp_path: Path) -> None:
    async with DevCluster(brokers=2, queues=2, enable_property_filter=True) as cluster:
        for broker in cluster.brokers.values():
            broker.topics.ensure(TOPIC, 2)
        with push_app() as app:
            service = service_for(tmp_path, cluster, app.url)
            await service.start()
            try:
                async with httpx.AsyncClient(base_url=f"http://127.0.0.1:{service.http.port}") as api:
                    cases = [
                        ("150", "eu", True),
                        ("50", "eu", False),
                        ("150", "us", False),
                        ("101", "eu", True),
                    ]
                    for i, (amount, region, _) in enumerate(cases):
                        resp = await api.post(
                            "/v1/messages",
                            json={
                                "topic": TOPIC,
                                "bodyBase64": base64.b64encode(str(i).encode()).decode(),
                                "properties": {"amount": amount, "region": region},
                            },
                        )
                        assert resp.status_code < 300, resp.text
                    await app.until(lambda got: len(got) >= 2)
                    consumer = service.subscriptions.consumers["orders"]  # type: ignore[union-attr]
                    ends = {
                        mq: cluster.brokers[mq.broker_name].store.max_offset(TOPIC, mq.queue_id)
                        for mq in consumer.queues
                        if mq.topic == TOPIC
                    }
                    while any(consumer.queues[mq].pq.next_offset < end for mq, end in ends.items()):
                        await consumer.stats.reach("pulls", consumer.stats["pulls"] + 1)
                    assert sorted(r.body for r in app.got) == [b"0", b"3"]
            finally:
                await service.stop()


async def test_brokers_without_the_property_filter_stop_the_start(tmp_path: Path) -> None:
    async with DevCluster(brokers=1, queues=2) as cluster:
        next(iter(cluster.brokers.values())).topics.ensure(TOPIC, 2)
        service = service_for(tmp_path, cluster, "http://127.0.0.1:9/none")
        try:
            with pytest.raises(StartupError) as err:
                await service.start()
        finally:
            await service.stop()
    message = str(err.value)
    assert "cannot start the subscriptions' consumers" in message and "g-sql" in message
    assert "does not support consumer to filter message by SQL92" in message and "\n" not in message
