"""Raw requests for devbroker tests, built by hand so a test controls every header field."""

from __future__ import annotations

from rocksidecar.rmq.codes import PULL_SUBSCRIPTION, RequestCode
from rocksidecar.rmq.protocol.frame import RemotingCommand

V1_NAMES = (
    *("producerGroup", "topic", "defaultTopic", "defaultTopicQueueNums", "queueId", "sysFlag"),
    *("bornTimestamp", "flag", "properties", "reconsumeTimes"),
)


def send(
    topic: str,
    queue_id: int = 0,
    body: bytes = b"hello",
    properties: str = "TAGS\x01TagA\x02WAIT\x01true",
    *,
    code: int = RequestCode.SEND_MESSAGE_V2,
    default_topic: str = "TBW102",
) -> RemotingCommand:
    """SEND_MESSAGE_V2 (letters) or, with code 10, SEND_MESSAGE (long names)."""
    values = ("pg", topic, default_topic, "4", str(queue_id), "0", "1700000000000", "0", properties, "0")
    keys = "abcdefghij" if code != RequestCode.SEND_MESSAGE else V1_NAMES
    return RemotingCommand(code, dict(zip(keys, values, strict=True)), body)


def pull(
    topic: str,
    queue_id: int = 0,
    offset: int = 0,
    *,
    group: str = "cg",
    sys_flag: int = PULL_SUBSCRIPTION,
    subscription: str = "*",
    expression_type: str = "TAG",
    suspend_ms: int = 0,
    commit_offset: int = 0,
) -> RemotingCommand:
    return RemotingCommand(
        RequestCode.PULL_MESSAGE,
        {
            "consumerGroup": group,
            "topic": topic,
            "queueId": str(queue_id),
            "queueOffset": str(offset),
            "maxMsgNums": "32",
            "sysFlag": str(sys_flag),
            "commitOffset": str(commit_offset),
            "suspendTimeoutMillis": str(suspend_ms),
            "subscription": subscription,
            "subVersion": "0",
            "expressionType": expression_type,
        },
    )
