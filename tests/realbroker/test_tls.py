"""TLS to real RocketMQ 4.9.4 (rmq.tls): its name server and brokers run in tls.server.mode=permissive,
their default, with the self-signed certificate each makes at start, so Java's default client (TLS on,
nothing verified) and ours reach them alike. Routes, sends, a pull and a consumer group's offsets go over
TLS. With the servers in enforcing mode (ROCKSIDECAR_TEST_TLS_ENFORCING=1) a plain connection is refused
and the sidecar works over TLS. Skipped unless ROCKSIDECAR_TEST_NAMESRV is set (see conftest.py)."""

from __future__ import annotations

import base64
import os
from pathlib import Path

import httpx
import pytest

from rocksidecar.app.service import COLUMN_FAMILIES, Service
from rocksidecar.app.subscriptions.spec import SubscriptionSpec
from rocksidecar.rmq import BrokerApi, Message, NameServerClient, RemotingClient, RocketMQError, new_uniq_id
from rocksidecar.rmq.consumer import ConsumeFrom, ConsumerConfig, PushConsumer
from rocksidecar.rmq.tls import client_context
from rocksidecar.storage.rocks import RocksKV
from tests.app.conftest import settings_for
from tests.app.push_app import push_app
from tests.realbroker.conftest import create_topic_everywhere, unique_topic
from tests.rmq.consumer.helpers import Recorder


async def test_routes_sends_pulls_and_a_consumer_over_tls(namesrv_addr: str) -> None:
    client = RemotingClient(tls=client_context())
    ns, api = NameServerClient(client, namesrv_addr), BrokerApi(client, producer_group="rs_tls_test")
    consumer: PushConsumer | None = None
    try:
        topic = unique_topic("RsTls")
        route = await create_topic_everywhere(ns, api, topic)
        sent = []
        for mq in route.publish_queues(topic):
            msg = Message(topic, f"{mq.broker_name}/{mq.queue_id}".encode(), id=new_uniq_id())
            await api.send(route.master_addr(mq.broker_name) or "", mq, msg, msg.id or "", 10.0)
            sent.append(msg.body)
        conns = list(client._conns.values())
        assert conns and all(
            c._transport is not None and c._transport.get_extra_info("ssl_object") for c in conns
        )
        rec = Recorder()
        group = f"rs_tls_{os.getpid()}_{topic[-8:]}"
        config = ConsumerConfig(
            group, instance_name=f"tls-{os.getpid()}", consume_from=ConsumeFrom.FIRST_OFFSET
        )
        consumer = PushConsumer(config, namesrv_addr, rec, client=client)
        client._on_request = consumer.on_broker_request  # the brokers' requests on our TLS connections
        consumer.subscribe(topic)
        await consumer.start()
        await rec.until(lambda got: len(got) >= len(sent))
        assert sorted(m.body for m in rec.got) == sorted(sent)
    finally:
        if consumer is not None:
            await consumer.close()
        await client.close()


ENFORCING_ENV = "ROCKSIDECAR_TEST_TLS_ENFORCING"


async def test_servers_that_take_tls_only_refuse_plain_and_serve_the_sidecar(
    namesrv_addr: str, tmp_path: Path
) -> None:
    """Name server and brokers started with tls.server.mode=enforcing (and tls.enable for the brokers'
    own connections to the name server): a plain connection is dropped; the sidecar with ROCKSIDECAR_TLS
    sends, and its subscription receives, over TLS."""
    if os.environ.get(ENFORCING_ENV) != "1":
        pytest.skip(
            f"needs servers in TLS enforcing mode and {ENFORCING_ENV}=1: JAVA_TOOL_OPTIONS="
            '"-Dtls.server.mode=enforcing -Dtls.enable=true" real-broker.sh start 2'
        )
    plain = RemotingClient(connect_timeout_s=3.0)
    try:
        with pytest.raises(RocketMQError):
            await NameServerClient(plain, namesrv_addr, timeout_s=3.0).get_cluster_info()
    finally:
        await plain.close()
    topic = unique_topic("RsTlsSidecar")
    with push_app() as app:
        sub = SubscriptionSpec("tls", topic, f"rs_tls_sub_{os.getpid()}", app.url, consume_from="first")
        settings = settings_for(tmp_path, namesrv=(namesrv_addr,), subscriptions=(sub,), tls=True)
        (tmp_path / "data").mkdir()
        service = Service(settings, kv=RocksKV.open(tmp_path / "data" / "store", COLUMN_FAMILIES))
        await service.start()
        try:
            async with httpx.AsyncClient(base_url=f"http://127.0.0.1:{service.http.port}") as api:
                body = {"topic": topic, "bodyBase64": base64.b64encode(b"enforced").decode()}
                resp = await api.post("/v1/messages", json=body)
                assert resp.status_code == 200 and resp.json()["status"] == "SENT", resp.text
                await app.until(lambda got: len(got) >= 1, timeout_s=60)
        finally:
            await service.stop()
    assert [g.body for g in app.got] == [b"enforced"]
