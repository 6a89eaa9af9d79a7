"""ConsumerRunningInfo: our answer in fastjson's shape, read back; a Java client's answer read too; a
member that does not answer counts as holding nothing."""

from __future__ import annotations

import orjson
import pytest

from rocksidecar.rmq.consumer.holdings import read_holdings
from rocksidecar.rmq.consumer.process_queue import ProcessQueue
from rocksidecar.rmq.consumer.running_info import QueueInfo, encode_running_info, owned_queues, queue_info
from rocksidecar.rmq.errors import BrokerSystemError, FrameError, RequestTimeout
from rocksidecar.rmq.message import MessageQueue
from tests.rmq.consumer.factory import stored

# As rocketmq-client 4.9.4 writes it (fastjson: object keys in mqTable, fields alphabetical), trimmed.
JAVA_BODY = (
    b'{"mqTable":{{"brokerName":"broker-a","queueId":0,"topic":"T"}:{"cachedMsgCount":0,"commitOffset":5,'
    b'"droped":false,"locked":false},{"brokerName":"broker-b","queueId":3,"topic":"T"}:{"cachedMsgCount":1,'
    b'"droped":false},{"brokerName":"broker-a","queueId":1,"topic":"%RETRY%g"}:{"droped":false},'
    b'{"brokerName":"broker-a","queueId":2,"topic":"T"}:{"droped":true}},'
    b'"properties":{"PROP_CONSUME_TYPE":"CONSUME_PASSIVELY","note":"a {\\"brokerName\\":\\"x\\"}: b"},'
    b'"statusTable":{"T":{"consumeFailedMsgs":0,"consumeFailedTPS":0.0,"consumeOKTPS":0.0,"consumeRT":0.0,'
    b'"pullRT":0.0,"pullTPS":0.0}},"subscriptionSet":[{"classFilterMode":false,"codeSet":[],"expressionType":'
    b'"TAG","subString":"*","subVersion":1,"tagsSet":[],"topic":"T"}]}'
)


def test_a_java_answer_is_read_dropped_queues_and_other_topics_left_out() -> None:
    assert owned_queues(JAVA_BODY, "T") == {
        MessageQueue("T", "broker-a", 0),
        MessageQueue("T", "broker-b", 3),
    }
    assert MessageQueue("%RETRY%g", "broker-a", 1) in owned_queues(JAVA_BODY)


def test_our_answer_has_fastjsons_shape_and_reads_back() -> None:
    pq = ProcessQueue(7, clock=lambda: 100.0)
    pq.put([stored(7), stored(8)], 9)
    queues = {
        MessageQueue("T", "broker-b", 0): queue_info(pq, now_mono=101.0, now_wall_ms=50_000),
        MessageQueue("T", "broker-a", 1): QueueInfo(3, 0, 0, 0, 0, False, 0, False, 1, 1),
    }
    body = encode_running_info({"b": "2", "a": "1"}, [{"topic": "T", "subString": "*"}], queues)
    assert body.startswith(
        b'{"mqTable":{{"brokerName":"broker-a","queueId":1,"topic":"T"}:{"cachedMsgCount":0'
    )
    assert owned_queues(body, "T") == set(queues)
    # Everything but the object keys is plain JSON: check the values through the reader's quoting.
    doc = orjson.loads(body.replace(b"}:{", b"}\x00{").split(b"\x00")[-1].split(b'},"properties"')[0])
    assert (doc["commitOffset"], doc["cachedMsgMinOffset"], doc["cachedMsgMaxOffset"]) == (7, 7, 8)
    assert (doc["cachedMsgCount"], doc["lastPullTimestamp"]) == (2, 49_000)
    assert b'"properties":{"a":"1","b":"2"}' in body


@pytest.mark.parametrize("body", [b"", b"not json", b'{"mqTable":[1]}', b'{"mqTable":{{"topic":"T"}:{}}}'])
def test_a_garbled_answer_is_a_frame_error(body: bytes) -> None:
    with pytest.raises(FrameError):
        owned_queues(body)


class _Api:
    def __init__(self, answers: dict[str, bytes]) -> None:
        self.answers = answers
        self.asked: list[tuple[str, str, str, float]] = []

    async def get_consumer_running_info(
        self, addr: str, group: str, client_id: str, timeout_s: float
    ) -> bytes:
        self.asked.append((addr, group, client_id, timeout_s))
        if client_id == "leaving":
            raise BrokerSystemError("The Consumer Group <g> not exist in this consumer", addr=addr)
        if client_id not in self.answers:
            raise RequestTimeout("no answer", addr=addr)
        return self.answers[client_id]


async def test_holdings_ask_every_other_member_and_are_unknown_when_one_is_silent() -> None:
    mine = {MessageQueue("T", "broker-a", 5), MessageQueue("U", "broker-a", 0)}
    api = _Api({"java": JAVA_BODY, "garbled": b"{"})
    held = await read_holdings(api, "b:1", "g", "T", ["me", "java", "java", "leaving"], "me", mine, 2.0)  # type: ignore[arg-type]
    assert held == {
        "me": {MessageQueue("T", "broker-a", 5)},
        "java": {MessageQueue("T", "broker-a", 0), MessageQueue("T", "broker-b", 3)},
        "leaving": set(),
    }
    for silent in ("silent", "garbled"):
        assert await read_holdings(api, "b:1", "g", "T", ["me", "java", silent], "me", mine, 2.0) is None  # type: ignore[arg-type]
    assert [a[2] for a in api.asked] == ["java", "leaving", "java", "silent", "java", "garbled"]
    assert all(a[0] == "b:1" and a[1] == "g" and a[3] == 2.0 for a in api.asked)
