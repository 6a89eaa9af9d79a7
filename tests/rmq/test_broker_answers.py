"""Numbers and lists in a broker's answers are checked before they are used: a broken or malicious
broker's answer fails that call (FrameError, a RocketMQError every caller handles) instead of raising
something else out of it, wedging a queue, or making the client do work without bound."""

from __future__ import annotations

import orjson
import pytest

from rocksidecar.rmq.broker import MAX_CONSUMER_IDS, BrokerApi
from rocksidecar.rmq.codes import ResponseCode
from rocksidecar.rmq.consumer.broker_calls import QueueLocker
from rocksidecar.rmq.errors import FrameError
from rocksidecar.rmq.message import Message, MessageQueue
from rocksidecar.rmq.protocol.frame import RemotingCommand
from tests.fakes import ScriptedInvoker

MQ = MessageQueue("T", "broker-a", 1)
ADDR = "10.0.0.1:10911"


def answering(ext: dict[str, str] | None = None, body: bytes = b"") -> ScriptedInvoker:
    async def answer(addr: str, cmd: RemotingCommand) -> RemotingCommand:
        return cmd.response(ResponseCode.SUCCESS, ext_fields=dict(ext or {}), body=body)

    return ScriptedInvoker(answer)


PULL_OK = {"nextBeginOffset": "10", "minOffset": "0", "maxOffset": "20", "suggestWhichBrokerId": "0"}


async def pull(ext: dict[str, str], offset: int = 5) -> int:
    result = await BrokerApi(answering(ext)).pull(ADDR, "g", MQ, offset, timeout_s=1.0)
    return result.next_begin_offset


async def test_a_sound_pull_answer_is_taken() -> None:
    assert await pull(PULL_OK) == 10
    assert await pull({**PULL_OK, "nextBeginOffset": "20"}) == 20  # up to the queue's end
    assert await pull({**PULL_OK, "nextBeginOffset": "30", "maxOffset": "20"}, offset=30) == 30  # a slave


@pytest.mark.parametrize(
    "ext",
    [
        {**PULL_OK, "suggestWhichBrokerId": "slave"},  # before: ValueError killed the queue's pull task
        {**PULL_OK, "nextBeginOffset": str(10**30), "maxOffset": str(10**30)},  # past a Java long
        {**PULL_OK, "nextBeginOffset": str(2**62)},  # past maxOffset: would skip what lies between
        {**PULL_OK, "nextBeginOffset": "-7"},
        {**PULL_OK, "maxOffset": "1e3"},
        {**PULL_OK, "minOffset": "\u0661\u0662"},  # Arabic-Indic digits, which int() takes
    ],
)
async def test_a_pull_answer_with_bad_numbers_is_a_frame_error(ext: dict[str, str]) -> None:
    with pytest.raises(FrameError):
        await pull(ext)


async def test_a_send_answer_with_a_bad_queue_id_is_a_frame_error() -> None:
    # Before: ValueError out of send, which the producer's retry loop (RocketMQError) let through.
    api = BrokerApi(answering({"queueId": "one", "queueOffset": "3", "msgId": "X"}))
    with pytest.raises(FrameError, match="queueId"):
        await api.send(ADDR, MQ, Message("T", b"b"), "K", 1.0)


@pytest.mark.parametrize(
    ("queue_id", "offset"),
    [
        ("one", "3"),
        ("1", str(2**63)),  # past a Java long: 19 digits, where the plain-digit reading stops
        ("1", "-" + str(2**63 + 1)),
        ("1", "\u0661\u0662"),  # digits to isdigit() and int(), not ASCII
        ("\u0661", "3"),
        (str(2**31), ""),  # an empty offset is no number
        ("1", " 3"),
    ],
)
async def test_a_send_answer_with_a_bad_number_is_a_frame_error(queue_id: str, offset: str) -> None:
    api = BrokerApi(answering({"queueId": queue_id, "queueOffset": offset, "msgId": "X"}))
    with pytest.raises(FrameError):
        await api.send(ADDR, MQ, Message("T", b"b"), "K", 1.0)


@pytest.mark.parametrize(
    ("queue_id", "offset", "stored_in", "stored_at"),
    [
        ("1", "3", 1, 3),
        ("01", "0", 1, 0),  # the queue asked for, in other digits
        (None, str(2**63 - 1), 1, 2**63 - 1),  # no queueId: the queue asked for; the largest long
        ("2", "9" * 18, 2, 10**18 - 1),  # the longest plain-digit text
        ("3", "-5", 3, -5),  # a negative long is a long (java_int's reading)
        ("4", "0" * 30 + "7", 4, 7),  # long text of a small number
    ],
)
async def test_a_send_answer_is_read_as_java_reads_its_numbers(
    queue_id: str | None, offset: str, stored_in: int, stored_at: int
) -> None:
    ext = {"queueOffset": offset, "msgId": "X"} | ({} if queue_id is None else {"queueId": queue_id})
    result = await BrokerApi(answering(ext)).send(ADDR, MQ, Message("T", b"b"), "K", 1.0)
    assert (result.queue.queue_id, result.queue_offset, result.offset_msg_id) == (stored_in, stored_at, "X")
    assert result.queue is MQ or stored_in != MQ.queue_id  # the queue asked for, not a copy of it


@pytest.mark.parametrize(
    "body",
    [
        orjson.dumps({"consumerIdList": [f"c{i}" for i in range(MAX_CONSUMER_IDS + 1)]}),
        orjson.dumps({"consumerIdList": "c1"}),  # before: list("c1") == ["c", "1"]
        orjson.dumps({"consumerIdList": [1, 2]}),
        orjson.dumps(["c1"]),  # before: AttributeError
        b"{not json",  # before: orjson.JSONDecodeError
    ],
)
async def test_a_consumer_list_of_the_wrong_shape_or_size_is_a_frame_error(body: bytes) -> None:
    with pytest.raises(FrameError):
        await BrokerApi(answering(body=body)).get_consumer_list(ADDR, "g")


async def test_a_consumer_list_within_the_bound_is_taken() -> None:
    body = orjson.dumps({"consumerIdList": [f"c{i}" for i in range(MAX_CONSUMER_IDS)]})
    assert len(await BrokerApi(answering(body=body)).get_consumer_list(ADDR, "g")) == MAX_CONSUMER_IDS


async def test_a_lock_answer_listing_queues_not_asked_for_grants_only_those_asked() -> None:
    # Before: every queue the broker listed came back as locked, and the rebalance added (and pulled)
    # queues the allocation never gave this client.
    asked = [MessageQueue("T", "broker-a", 0), MessageQueue("T", "broker-a", 1)]
    listed = [*asked[1:], MessageQueue("T", "broker-a", 7), MessageQueue("Other", "broker-z", 0)]
    body = orjson.dumps(
        {
            "lockOKMQSet": [
                {"topic": m.topic, "brokerName": m.broker_name, "queueId": m.queue_id} for m in listed
            ]
        }
    )
    locker = QueueLocker(answering(body=body), "g", "client-1")
    assert await locker.lock(ADDR, iter(asked)) == {asked[1]}
