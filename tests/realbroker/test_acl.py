"""ACL 1.0 signing against a real broker started with ROCKETMQ_ACL=1 (real-broker.sh) and its stock
plain_acl.yml: account RocketMQ/12345678 may publish and subscribe topicB, nothing else by default.
Needs ROCKSIDECAR_TEST_ACL=accessKey:secretKey:allowedTopic:deniedTopic; skipped without it."""

from __future__ import annotations

import asyncio
import contextlib
import os
from collections.abc import Sequence

import pytest

from rocksidecar.rmq import (
    BrokerApi,
    Credentials,
    Message,
    MessageExt,
    MessageQueue,
    NameServerClient,
    RemotingClient,
    SendFailed,
    TopicNotExist,
)
from rocksidecar.rmq.consumer import ConsumeFrom, ConsumerConfig, ConsumeStatus, PushConsumer
from rocksidecar.rmq.producer import Producer, ProducerConfig
from tests.realbroker.conftest import pull_queue, wait_for_brokers

ACL_ENV = "ROCKSIDECAR_TEST_ACL"


@pytest.fixture
def acl(namesrv_addr: str) -> tuple[str, str, str, str]:
    spec = os.environ.get(ACL_ENV)
    if not spec or spec.count(":") != 3:
        pytest.skip(
            f"ACL tests need a broker with aclEnable=true and {ACL_ENV}=ak:sk:allowedTopic:deniedTopic "
            "(ROCKETMQ_ACL=1 real-broker.sh start; RocketMQ:12345678:topicB:topicA for its plain_acl.yml)"
        )
    ak, sk, allowed, denied = spec.split(":")
    return ak, sk, allowed, denied


async def send(namesrv: str, creds: Credentials | None, topic: str, batch: bool = False) -> object:
    client = RemotingClient(credentials=creds)
    producer = Producer(
        NameServerClient(client, namesrv),
        BrokerApi(client, producer_group="rs_acl"),
        ProducerConfig(group="rs_acl"),
    )
    try:
        if batch:
            return await producer.send_batch([Message(topic, b"one"), Message(topic, b"two")])
        return await producer.send(Message(topic, b"signed"))
    finally:
        await client.close()


async def test_signed_requests_pass_and_bad_ones_are_refused(
    namesrv_addr: str, acl: tuple[str, str, str, str]
) -> None:
    ak, sk, allowed, denied = acl
    client = RemotingClient()
    try:  # name servers do not check ACL; wait until a restarted cluster is fully registered
        ns = NameServerClient(client, namesrv_addr)
        brokers = await wait_for_brokers(ns)
        for _ in range(100):
            with contextlib.suppress(TopicNotExist):
                if {q.broker_name for q in (await ns.get_route("TBW102")).queue_datas} >= set(brokers):
                    break
            await asyncio.sleep(0.1)  # polling an external system we do not control
    finally:
        await client.close()
    ok = await send(namesrv_addr, Credentials(ak, sk), allowed)
    batch = await send(namesrv_addr, Credentials(ak, sk), allowed, batch=True)
    assert not any(isinstance(r, Exception) for r in batch)  # type: ignore[attr-defined]
    for creds, topic, reason in (
        (Credentials(ak, sk + "x"), allowed, "Check signature failed"),
        (None, allowed, "No accessKey is configured"),
        (Credentials(ak, sk), denied, "permission"),
    ):
        with pytest.raises(SendFailed) as info:
            await send(namesrv_addr, creds, topic)
        assert reason in str(info.value)

    client = RemotingClient(credentials=Credentials(ak, sk))  # a signed pull reads the message back
    try:
        api = BrokerApi(client)
        route = await NameServerClient(client, namesrv_addr).get_route(allowed)
        queue = ok.queue  # type: ignore[attr-defined]
        pulled = await pull_queue(api, route.master_addr(queue.broker_name), queue, "rs_acl")  # type: ignore[arg-type]
        assert ok.msg_id in {m.uniq_key for m in pulled}  # type: ignore[attr-defined]
    finally:
        await client.close()


async def test_a_signed_push_consumer_receives_and_commits(
    namesrv_addr: str, acl: tuple[str, str, str, str]
) -> None:
    """Issue 13: a consumer's requests (heartbeat, pull, offsets, send-back, locks) are signed too. The
    group must be one the account may subscribe with (groupB of the stock plain_acl.yml, or
    ROCKSIDECAR_TEST_ACL_GROUP)."""
    ak, sk, allowed, _denied = acl
    group = os.environ.get("ROCKSIDECAR_TEST_ACL_GROUP", "groupB")
    got: list[MessageExt] = []
    arrived = asyncio.Event()

    async def listener(msgs: Sequence[MessageExt], mq: MessageQueue) -> ConsumeStatus:
        got.extend(msgs)
        arrived.set()
        return ConsumeStatus.SUCCESS

    consumer = PushConsumer(
        ConsumerConfig(group, instance_name=f"acl-{os.getpid()}", consume_from=ConsumeFrom.FIRST_OFFSET),
        namesrv_addr,
        listener,
        credentials=Credentials(ak, sk),
    )
    consumer.subscribe(allowed)
    # Sent first (it may create the topic); the group resumes from its committed offset, or the first.
    sent = await send(namesrv_addr, Credentials(ak, sk), allowed)
    await consumer.start()
    try:
        assert consumer.queues, "the signed consumer owns no queue: its heartbeat or member list failed"
        async with asyncio.timeout(60):
            while sent.msg_id not in {m.uniq_key for m in got}:  # type: ignore[attr-defined]
                arrived.clear()
                await arrived.wait()
        assert consumer.stats["pull_errors"] == 0
    finally:
        await consumer.close()
