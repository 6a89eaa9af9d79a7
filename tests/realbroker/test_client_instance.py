"""One ClientInstance under a producer and a push consumer on real RocketMQ 4.9.4 (issue 12): the broker
takes the single heartbeat carrying both groups, lists the instance's one client id in the consumer group,
and what the producer sends reaches the consumer. Skipped unless ROCKSIDECAR_TEST_NAMESRV is set."""

from __future__ import annotations

import asyncio
import os

from rocksidecar.rmq import ClientInstance, Message
from rocksidecar.rmq.consumer import ConsumeFrom, ConsumerConfig, PushConsumer
from rocksidecar.rmq.producer import Producer, ProducerConfig
from tests.realbroker.conftest import create_topic_everywhere, unique_topic, wait_for_brokers
from tests.rmq.consumer.helpers import Recorder

WAIT_S = 60.0


async def test_one_instance_carries_producer_and_consumer(namesrv_addr: str) -> None:
    topic = unique_topic("rs_instance")
    group = f"rs_instance_cg_{os.getpid()}"
    instance = ClientInstance(namesrv_addr)
    await create_topic_everywhere(instance.namesrv, instance.api, topic)
    producer = Producer(
        instance.namesrv,
        instance.api,
        ProducerConfig(group=f"rs_instance_pg_{os.getpid()}"),
        instance=instance,
    )
    recorder = Recorder()
    consumer = PushConsumer(
        ConsumerConfig(group, consume_from=ConsumeFrom.FIRST_OFFSET),
        namesrv_addr,
        recorder,
        instance=instance,
    )
    consumer.subscribe(topic)
    try:
        await producer.start()
        sent = {(await producer.send(Message(topic, f"m{i}".encode()))).msg_id for i in range(8)}
        await consumer.start()
        addrs = await wait_for_brokers(instance.namesrv)
        for addr in addrs.values():
            assert await instance.api.get_consumer_list(addr, group) == [instance.client_id]
        async with asyncio.timeout(WAIT_S):
            await recorder.until(lambda got: sent <= {m.uniq_key for m in got})
        assert producer.client_id == consumer.client_id == instance.client_id
    finally:
        await consumer.close()
        await producer.close()
        await instance.close()
