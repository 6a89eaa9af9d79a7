"""CONSUME_MESSAGE_DIRECTLY: a broker hands one stored message to one member (the Dashboard's "resend
message", ``mqadmin queryMsgById -g -d``); the member's listener gets it once and the answer is Java's
ConsumeMessageDirectlyResult. On devbroker, and the result for every listener outcome."""

from __future__ import annotations

import functools
import itertools
from collections.abc import Sequence
from types import SimpleNamespace
from typing import Any

import orjson
import pytest

from rocksidecar.devbroker import DevCluster
from rocksidecar.rmq.codes import RequestCode, ResponseCode
from rocksidecar.rmq.consumer.config import ConsumeFrom, ConsumerConfig, ConsumeStatus, ListenerResult
from rocksidecar.rmq.consumer.direct import consume_directly
from rocksidecar.rmq.consumer.offset_store import ReadType
from rocksidecar.rmq.consumer.push_consumer import PushConsumer
from rocksidecar.rmq.message import MessageExt, MessageQueue
from rocksidecar.rmq.pool import RemotingClient
from rocksidecar.rmq.protocol.frame import RemotingCommand
from tests.rmq.consumer.factory import stored
from tests.rmq.consumer.helpers import Recorder, send_to_queues, start

TOPIC = "DirectT"
start_ = functools.partial(start, topic=TOPIC)


def config(group: str) -> ConsumerConfig:
    return ConsumerConfig(
        group, instance_name="one", client_ip="127.0.0.1", consume_from=ConsumeFrom.FIRST_OFFSET
    )


async def resend(cluster: DevCluster, broker: str, fields: dict[str, str]) -> RemotingCommand:
    """What the Dashboard asks a broker for a "resend message" to one client."""
    client = RemotingClient()
    try:
        cmd = RemotingCommand(RequestCode.CONSUME_MESSAGE_DIRECTLY, fields)
        return await client.invoke(cluster.brokers[broker].addr, cmd, 5.0)
    finally:
        await client.close()


async def test_the_member_consumes_the_stored_message_once_and_answers_its_result(
    cluster: DevCluster, consumers: list[PushConsumer]
) -> None:
    await send_to_queues(cluster, TOPIC, 1, queues=1)
    rec = Recorder(
        decide=lambda m: ConsumeStatus.RECONSUME_LATER if len(rec.got) > 3 else ConsumeStatus.SUCCESS
    )
    consumer = await start_(consumers, cluster, config("GD-one"), rec)
    await rec.until(lambda got: len(got) >= 2)
    target = next(m for m in rec.got if m.body.startswith(b"broker-b"))
    mq = MessageQueue(TOPIC, "broker-b", 0)
    committed = await consumer.offsets.read(mq, ReadType.MEMORY)
    fields = {"consumerGroup": "GD-one", "clientId": consumer.client_id, "msgId": target.offset_msg_id}

    answer = await resend(cluster, "broker-b", fields)
    assert answer.code == ResponseCode.SUCCESS, answer.remark
    result = orjson.loads(answer.body)
    assert (result["consumeResult"], result["order"], result["autoCommit"]) == ("CR_SUCCESS", False, True)
    assert result["spentTimeMills"] >= 0
    again = rec.got[2]
    assert (again.uniq_key, again.body, again.queue_offset) == (
        target.uniq_key,
        target.body,
        target.queue_offset,
    )

    answer = await resend(cluster, "broker-b", fields)  # now the listener asks for it later
    assert orjson.loads(answer.body)["consumeResult"] == "CR_LATER"
    # outside the queue's flow: no offset moved, nothing sent back to the retry topic
    assert await consumer.offsets.read(mq, ReadType.MEMORY) == committed
    assert consumer.stats["sent_back"] == 0
    assert len(rec.got) == 4

    gone = await resend(cluster, "broker-b", {**fields, "clientId": "nobody"})
    assert gone.code == ResponseCode.SYSTEM_ERROR and "not online" in (gone.remark or "")
    missing = await resend(cluster, "broker-b", {**fields, "msgId": "7F00000100002A9F" + "00000000FFFFFFFF"})
    assert missing.code == ResponseCode.SYSTEM_ERROR


PEER: Any = SimpleNamespace(addr="127.0.0.1:10911")


@pytest.mark.parametrize("body", [b"", b"\x00" * 3, b"\xff" * 200])
async def test_an_undecodable_message_is_a_system_error_and_reaches_no_listener(
    cluster: DevCluster, consumers: list[PushConsumer], body: bytes
) -> None:
    rec = Recorder()
    consumer = await start_(consumers, cluster, config("GD-bad"), rec)
    cmd = RemotingCommand(RequestCode.CONSUME_MESSAGE_DIRECTLY, {"consumerGroup": "GD-bad"}, body)
    answer = await consumer.on_broker_request(PEER, cmd)
    assert answer is not None and answer.code == ResponseCode.SYSTEM_ERROR
    assert "undecodable" in (answer.remark or "")
    assert rec.got == []


def listener_of(result: Any) -> Any:
    async def listener(msgs: Sequence[MessageExt], mq: MessageQueue) -> ListenerResult:
        if isinstance(result, Exception):
            raise result
        return result  # type: ignore[no-any-return]

    return listener


@pytest.mark.parametrize(
    ("answer", "orderly", "expected"),
    [
        (ConsumeStatus.SUCCESS, False, {"consumeResult": "CR_SUCCESS"}),
        (ConsumeStatus.RECONSUME_LATER, False, {"consumeResult": "CR_LATER"}),
        (ConsumeStatus.SUSPEND, True, {"consumeResult": "CR_LATER"}),
        ([ConsumeStatus.SUCCESS], False, {"consumeResult": "CR_SUCCESS"}),  # one status per message
        ([], False, {"consumeResult": "CR_RETURN_NULL"}),
        (None, False, {"consumeResult": "CR_RETURN_NULL"}),
        (
            ConsumeStatus.DEAD_LETTER,
            False,
            {"consumeResult": "CR_LATER", "remark": "the listener dead-lettered it (DEAD_LETTER)"},
        ),
        (
            RuntimeError("app down"),
            True,
            {"consumeResult": "CR_THROW_EXCEPTION", "remark": "RuntimeError: app down"},
        ),
    ],
)
async def test_each_listener_outcome_is_javas_result(
    answer: Any, orderly: bool, expected: dict[str, Any]
) -> None:
    ticks = itertools.count(10.0, 0.25)  # the listener's call takes a quarter second by this clock
    body = await consume_directly(
        listener_of(answer), stored(5), MessageQueue("T", "b", 0), orderly=orderly, clock=lambda: next(ticks)
    )
    assert orjson.loads(body) == {"autoCommit": True, "order": orderly, "spentTimeMills": 250, **expected}
    assert list(orjson.loads(body)) == sorted(orjson.loads(body))  # fastjson's field order
