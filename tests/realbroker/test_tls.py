"""TLS to real RocketMQ 4.9.4 (rmq.tls): its name server and brokers run in tls.server.mode=permissive,
their default, with the self-signed certificate each makes at start, so Java's default client (TLS on,
nothing verified) and ours reach them alike. Routes, sends, a pull and a consumer group's offsets go over
TLS. Skipped unless ROCKSIDECAR_TEST_NAMESRV is set (see conftest.py)."""

from __future__ import annotations

import os

from rocksidecar.rmq import BrokerApi, Message, NameServerClient, RemotingClient, new_uniq_id
from rocksidecar.rmq.consumer import ConsumeFrom, ConsumerConfig, PushConsumer
from rocksidecar.rmq.tls import client_context
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
