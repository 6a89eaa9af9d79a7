"""ACL for consumers: a PushConsumer given credentials signs every request it makes (heartbeat, pull,
offsets, member list, send-back, locks, unregister), as Java's AclClientRPCHook does; checked where the
requests arrive, on the brokers (devbroker does not verify signatures; we recompute each one)."""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Sequence

from rocksidecar.devbroker import DevCluster
from rocksidecar.rmq.acl import Credentials, signature
from rocksidecar.rmq.codes import RequestCode
from rocksidecar.rmq.connection import Connection
from rocksidecar.rmq.consumer.config import ConsumeFrom, ConsumerConfig, ConsumeStatus
from rocksidecar.rmq.consumer.push_consumer import PushConsumer
from rocksidecar.rmq.message import MessageExt, MessageQueue
from rocksidecar.rmq.protocol.frame import RemotingCommand
from tests.rmq.consumer.helpers import Recorder, send_to_queues

TOPIC = "AclT"
CREDS = Credentials("consumer-ak", "consumer-sk")


Handler = Callable[[Connection, RemotingCommand], Awaitable[RemotingCommand]]


def record_requests(cluster: DevCluster) -> list[RemotingCommand]:
    """Every request the brokers receive from now on, as received."""
    seen: list[RemotingCommand] = []

    def recording(handler: Handler) -> Handler:
        async def recorded(conn: Connection, cmd: RemotingCommand) -> RemotingCommand:
            seen.append(cmd)
            return await handler(conn, cmd)

        return recorded

    for broker in cluster.brokers.values():
        for code, handler in list(broker._handlers.items()):
            broker._handlers[code] = recording(handler)
    return seen


class FailOnce:
    """Fails the first delivery of each message (a send-back), then accepts."""

    def __init__(self) -> None:
        self.seen: set[str] = set()

    async def __call__(self, msgs: Sequence[MessageExt], mq: MessageQueue) -> ConsumeStatus:
        key = msgs[0].uniq_key or ""
        if key in self.seen:
            return ConsumeStatus.SUCCESS
        self.seen.add(key)
        return ConsumeStatus.RECONSUME_LATER


def config(group: str, **kw: object) -> ConsumerConfig:
    return ConsumerConfig(
        group,
        instance_name=group,
        client_ip="127.0.0.1",
        consume_from=ConsumeFrom.FIRST_OFFSET,
        **kw,  # type: ignore[arg-type]
    )


async def test_every_consumer_request_is_signed(cluster: DevCluster) -> None:
    await send_to_queues(cluster, TOPIC, 1)
    seen = record_requests(cluster)  # the consumer's requests only
    failing = PushConsumer(config("G-acl"), cluster.namesrv_addr, FailOnce(), credentials=CREDS)
    failing.subscribe(TOPIC)
    rec = Recorder()
    orderly = PushConsumer(config("G-acl-ord", orderly=True), cluster.namesrv_addr, rec, credentials=CREDS)
    orderly.subscribe(TOPIC)
    try:
        await failing.start()
        await orderly.start()
        await failing.stats.reach("sent_back", 1)
        await rec.until(lambda got: len(got) >= 8)
    finally:
        await failing.close()
        await orderly.close()
    codes = {cmd.code for cmd in seen}
    for code in (
        RequestCode.HEART_BEAT,
        RequestCode.PULL_MESSAGE,
        RequestCode.GET_CONSUMER_LIST_BY_GROUP,
        RequestCode.UPDATE_CONSUMER_OFFSET,
        RequestCode.CONSUMER_SEND_MSG_BACK,
        RequestCode.LOCK_BATCH_MQ,
        RequestCode.UNLOCK_BATCH_MQ,
        RequestCode.UNREGISTER_CLIENT,
    ):
        assert code in codes, RequestCode(code).name
    for cmd in seen:
        fields = cmd.ext_fields
        assert fields.get("AccessKey") == CREDS.access_key, RequestCode(cmd.code).name
        assert fields.get("Signature") == signature(fields, cmd.body, CREDS.secret_key)


async def test_without_credentials_nothing_is_signed(cluster: DevCluster) -> None:
    await send_to_queues(cluster, TOPIC, 1)
    seen = record_requests(cluster)  # the consumer's requests only
    rec = Recorder()
    consumer = PushConsumer(config("G-noacl"), cluster.namesrv_addr, rec)
    consumer.subscribe(TOPIC)
    try:
        await consumer.start()
        await rec.until(lambda got: len(got) >= 8)
    finally:
        await consumer.close()
    assert seen and not any("Signature" in cmd.ext_fields for cmd in seen)
