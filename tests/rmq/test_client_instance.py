"""One client instance under a producer and a push consumer: one client id, one heartbeat carrying both
groups, one connection per broker (Java's MQClientInstance)."""

from __future__ import annotations

from collections.abc import Sequence

from rocksidecar.devbroker import DevCluster
from rocksidecar.rmq import Message, MessageExt, MessageQueue, RemotingClient
from rocksidecar.rmq.client_instance import ClientInstance
from rocksidecar.rmq.codes import RequestCode, ResponseCode
from rocksidecar.rmq.consumer.config import ConsumeFrom, ConsumerConfig, ConsumeStatus
from rocksidecar.rmq.consumer.push_consumer import PushConsumer
from rocksidecar.rmq.producer import Producer, ProducerConfig
from rocksidecar.rmq.protocol.frame import RemotingCommand
from tests.rmq.consumer.helpers import Recorder

TOPIC = "InstanceT"


async def _nothing(msgs: Sequence[MessageExt], mq: MessageQueue) -> ConsumeStatus:
    return ConsumeStatus.SUCCESS


async def test_producer_and_consumer_share_one_heartbeat_client_id_and_connections(
    cluster: DevCluster,
) -> None:
    instance = ClientInstance(cluster.namesrv_addr)
    producer = Producer(instance.namesrv, instance.api, ProducerConfig(group="PG-inst"), instance=instance)
    recorder = Recorder()
    consumer = PushConsumer(
        ConsumerConfig("CG-inst", consume_from=ConsumeFrom.FIRST_OFFSET),
        cluster.namesrv_addr,
        recorder,
        instance=instance,
    )
    consumer.subscribe(TOPIC)
    for broker in cluster.brokers.values():
        await instance.api.create_topic(broker.addr, TOPIC)
    try:
        await producer.start()
        sent = await producer.send(Message(TOPIC, b"one"))
        await consumer.start()  # its first heartbeat carries the producer group too
        assert producer.client_id == consumer.client_id == instance.client_id
        for broker in cluster.brokers.values():
            clients = broker.clients
            assert clients.producer_ids("PG-inst") == [instance.client_id]
            assert clients.consumer_ids("CG-inst") == [instance.client_id]
            assert clients.connections_of(instance.client_id) == 1
        await recorder.until(lambda got: any(m.uniq_key == sent.msg_id for m in got))
        # one connection per broker plus the name server's, whatever both sides did
        assert isinstance(instance.invoker, RemotingClient)
        addrs = instance.invoker.connected_addresses()
        assert sorted(addrs) == sorted([cluster.namesrv_addr, *(b.addr for b in cluster.brokers.values())])
    finally:
        await consumer.close()
        await producer.close()
        await instance.close()
    for broker in cluster.brokers.values():
        assert broker.clients.consumer_ids("CG-inst") == []
        assert broker.clients.producer_ids("PG-inst") == []


async def test_broker_requests_reach_the_consumer_of_the_named_group(cluster: DevCluster) -> None:
    instance = ClientInstance(cluster.namesrv_addr)
    consumer = PushConsumer(ConsumerConfig("CG-notify"), cluster.namesrv_addr, _nothing, instance=instance)
    consumer.subscribe(TOPIC)
    for broker in cluster.brokers.values():
        await instance.api.create_topic(broker.addr, TOPIC)
    try:
        await consumer.start()
        before = consumer.stats["notified"]
        cmd = RemotingCommand(RequestCode.NOTIFY_CONSUMER_IDS_CHANGED, {"consumerGroup": "CG-notify"})
        assert await instance.on_broker_request(None, cmd) is None  # type: ignore[arg-type]
        assert consumer.stats["notified"] == before + 1
        other = RemotingCommand(RequestCode.NOTIFY_CONSUMER_IDS_CHANGED, {"consumerGroup": "CG-gone"})
        assert await instance.on_broker_request(None, other) is None  # type: ignore[arg-type]
        assert consumer.stats["notified"] == before + 1
        running_info = RemotingCommand(RequestCode.GET_CONSUMER_RUNNING_INFO, {"consumerGroup": "CG-gone"})
        answer = await instance.on_broker_request(None, running_info)  # type: ignore[arg-type]
        # As Java's ClientRemotingProcessor: the group is not here (the sticky strategy reads "owns nothing").
        assert answer is not None and answer.code == ResponseCode.SYSTEM_ERROR
        assert answer.remark == "The Consumer Group <CG-gone> not exist in this consumer"
        # The reset and status requests name their group in ``group`` (Java's request headers)
        status = RemotingCommand(
            RequestCode.GET_CONSUMER_STATUS_FROM_CLIENT, {"topic": TOPIC, "group": "CG-notify"}
        )
        answer = await instance.on_broker_request(None, status)  # type: ignore[arg-type]
        assert answer is not None and answer.code == ResponseCode.SUCCESS
        assert b"consumerTable" in answer.body and TOPIC.encode() in answer.body  # the consumer's own offsets
        status.ext_fields["group"] = "CG-gone"  # Java: an empty table for a group that is not here
        answer = await instance.on_broker_request(None, status)  # type: ignore[arg-type]
        assert answer is not None and answer.body == b'{"consumerTable":{},"messageQueueTable":{}}'
        reset = RemotingCommand(
            RequestCode.RESET_CONSUMER_CLIENT_OFFSET, {"topic": TOPIC, "group": "CG-gone"}
        )
        assert await instance.on_broker_request(None, reset) is None  # type: ignore[arg-type]
        direct = RemotingCommand(RequestCode.CONSUME_MESSAGE_DIRECTLY, {"consumerGroup": "CG-gone"}, b"x")
        answer = await instance.on_broker_request(None, direct)  # type: ignore[arg-type]
        assert (
            answer is not None
            and answer.code == ResponseCode.SYSTEM_ERROR
            and "not exist" in (answer.remark or "")
        )
        unknown = RemotingCommand(9999, {"consumerGroup": "CG-gone"})
        answer = await instance.on_broker_request(None, unknown)  # type: ignore[arg-type]
        assert answer is not None and answer.code == ResponseCode.REQUEST_CODE_NOT_SUPPORTED
    finally:
        await consumer.close()
        await instance.close()


async def test_instance_producer_and_consumer_nest_as_async_with(cluster: DevCluster) -> None:
    async with ClientInstance(cluster.namesrv_addr) as instance:
        for broker in cluster.brokers.values():
            await instance.api.create_topic(broker.addr, TOPIC)
        recorder = Recorder()
        consumer = PushConsumer(
            ConsumerConfig("CG-with", consume_from=ConsumeFrom.FIRST_OFFSET),
            cluster.namesrv_addr,
            recorder,
            instance=instance,
        )
        consumer.subscribe(TOPIC)
        config = ProducerConfig(group="PG-with")
        async with Producer(instance.namesrv, instance.api, config, instance=instance) as producer, consumer:
            await producer.send(Message(TOPIC, b"nested"))
            while not any(m.body == b"nested" for m in recorder.got):
                recorder.changed.clear()
                await recorder.changed.wait()
        clients = cluster.brokers["broker-a"].clients
        assert clients.consumer_ids("CG-with") == []  # the consumer left its group on exit
    assert instance._heartbeat._task is None  # the instance's heartbeat stopped on exit
