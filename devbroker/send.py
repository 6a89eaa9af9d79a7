"""SEND_MESSAGE (10, long header names), SEND_MESSAGE_V2 (310, letters) and SEND_BATCH_MESSAGE (320):
the checks of Java's msgCheck, topic auto-creation from TBW102, injected faults, and the stored form
of the protocol reference §3.8 (WAIT dropped from a single message, kept in a batch's as 4.9.4 keeps
it; CLUSTER added; born host = the connection's peer). A single message to a %RETRY% topic that has been
reconsumed its maximum times goes to the group's DLQ (handleRetryAndDLQ). A single non-transactional
message with a DELAY level waits in SCHEDULE_TOPIC_XXXX until the level's delay has passed
(CommitLog.asyncPutMessage; schedule.py); a batch with one of its own is refused (asyncPutMessages)."""

from __future__ import annotations

import asyncio
import random
import re
from collections.abc import Awaitable, Callable
from dataclasses import dataclass

from rocksidecar.rmq.broker import TRANSACTION_COMMIT_TYPE, TRANSACTION_NOT_TYPE
from rocksidecar.rmq.codes import RequestCode, ResponseCode
from rocksidecar.rmq.connection import Connection
from rocksidecar.rmq.errors import FrameError
from rocksidecar.rmq.message import (
    DEFAULT_MAX_BODY_BYTES,
    NOT_ALLOWED_SEND_TOPICS,
    PROPERTIES_MAX_BYTES,
    decode_properties,
)
from rocksidecar.rmq.message_codec import decode_batch, pack_host
from rocksidecar.rmq.protocol.frame import RemotingCommand

from .faults import Faults
from .headers import Reject
from .listener import ServerConnection
from .schedule import MAX_DELAY_LEVEL, Schedule, scheduled
from .send_back import DLQ_QUEUE_ID, dlq_topic, max_reconsume_times
from .store import MessageStore, NewMessage, tag_code
from .topics import RETRY_PREFIX, TopicConfig, TopicTable, topic_name_error
from .transactions import HALF_TOPIC, TRANSACTION_BITS, Transactions

REGION = "DefaultRegion"
_JAVA_INT = re.compile(r"[+-]?[0-9]+")  # what Integer.parseInt takes (and a 32-bit range)
_FIELDS = (
    "producerGroup",
    "topic",
    "defaultTopic",
    "defaultTopicQueueNums",
    "queueId",
    "sysFlag",
    "bornTimestamp",
    "flag",
    "properties",
    "reconsumeTimes",
    "maxReconsumeTimes",
)
# SendMessageRequestHeaderV2 names (k, unitMode, and m, batch, are not read)
_LETTERS = dict(zip(_FIELDS, "abcdefghijl", strict=True))
_LONG = {f: f for f in _FIELDS}
_OPTIONAL = frozenset({"properties", "reconsumeTimes", "maxReconsumeTimes"})
_NUMERIC = frozenset(
    {
        "defaultTopicQueueNums",
        "queueId",
        "sysFlag",
        "bornTimestamp",
        "flag",
        "reconsumeTimes",
        "maxReconsumeTimes",
    }
)
_UNKNOWN_HOST = pack_host("0.0.0.0", 0)
# SendMessageProcessor.handlePutMessageResult's remark for MESSAGE_ILLEGAL (4.9.4), with the store's
# maxMessageSize (4 MiB by default): what it answers a batch with a DELAY level, for one.
ILLEGAL_REMARK = (
    "the message is illegal, maybe msg body or properties length not matched. "
    f"msg body length limit {DEFAULT_MAX_BODY_BYTES}B, msg properties length limit 32KB."
)


@dataclass(frozen=True, slots=True)
class SendHeader:
    topic: str
    default_topic: str
    default_queue_nums: int
    queue_id: int
    sys_flag: int
    born_timestamp_ms: int
    flag: int
    properties: str
    reconsume_times: int
    max_reconsume_times: int | None  # None: the header has none

    @classmethod
    def parse(cls, ext: dict[str, str], letters: bool) -> SendHeader:
        """Raises:
        Reject: SYSTEM_ERROR naming the first missing or non-numeric required field.
        """
        k = _LETTERS if letters else _LONG
        try:  # the hot path: plain lookups; only a failure looks for what is wrong
            ext[k["producerGroup"]]  # required, though the broker does not use it
            max_times = ext.get(k["maxReconsumeTimes"])
            return cls(
                topic=ext[k["topic"]],
                default_topic=ext[k["defaultTopic"]],
                default_queue_nums=int(ext[k["defaultTopicQueueNums"]]),
                queue_id=int(ext[k["queueId"]]),
                sys_flag=int(ext[k["sysFlag"]]),
                born_timestamp_ms=int(ext[k["bornTimestamp"]]),
                flag=int(ext[k["flag"]]),
                properties=ext.get(k["properties"], ""),
                reconsume_times=int(ext.get(k["reconsumeTimes"], 0)),
                max_reconsume_times=None if max_times is None else int(max_times),
            )
        except (KeyError, ValueError):
            raise Reject(ResponseCode.SYSTEM_ERROR, _header_problem(ext, k)) from None


def _header_problem(ext: dict[str, str], keys: dict[str, str]) -> str:
    for name in _FIELDS:
        key = keys[name]
        if key not in ext:
            if name not in _OPTIONAL:
                return f"the request header lacks the required field {key!r}"
        elif name in _NUMERIC and not ext[key].lstrip("-").isdigit():
            return f"header field {key!r} is not an integer: {ext[key]!r}"
    return "undecodable send header"


def stored_properties(props: str, suffix: list[str]) -> tuple[str, str | None]:
    """(properties as stored, TAGS value): WAIT removed, the broker's own items appended."""
    items = [p for p in props.split("\x02") if p and not p.startswith("WAIT\x01")]
    tags = next((p[5:] for p in items if p.startswith("TAGS\x01")), None)
    text = "\x02".join(items + suffix)
    if len(text) > PROPERTIES_MAX_BYTES // 4 and len(text.encode()) > PROPERTIES_MAX_BYTES:
        raise Reject(ResponseCode.MESSAGE_ILLEGAL, f"message properties exceed {PROPERTIES_MAX_BYTES} bytes")
    return text, tags


def _delay_of(properties: str) -> int:
    """Message.getDelayTimeLevel: the DELAY property's value, 0 without one.

    Raises:
        Reject: SYSTEM_ERROR for a DELAY that is not an integer (Java's getDelayTimeLevel throws
            NumberFormatException, which the remoting layer answers so).
    """
    value = decode_properties(properties).get("DELAY")  # as the broker parses them: none if empty
    if value is None:
        return 0
    if not _JAVA_INT.fullmatch(value) or not -(2**31) <= int(value) < 2**31:  # Integer.parseInt
        raise Reject(ResponseCode.SYSTEM_ERROR, f"DELAY is not an integer: {value!r}")
    return int(value)


def _undelayed_batch(h: SendHeader) -> None:
    """CommitLog.asyncPutMessages (4.9.4) refuses a batch whose own properties (the header's) carry a DELAY
    level above 0, MESSAGE_ILLEGAL, before it reads the batch's messages: it cannot schedule a batch. A
    DELAY of a message in it is not read (stored at once, as _batch stores it).

    Raises:
        Reject: MESSAGE_ILLEGAL with handlePutMessageResult's remark; SYSTEM_ERROR as _delay_of.
    """
    if _delay_of(h.properties) > 0:
        raise Reject(ResponseCode.MESSAGE_ILLEGAL, ILLEGAL_REMARK)


def _check_body(body: bytes) -> None:
    if len(body) > DEFAULT_MAX_BODY_BYTES:
        raise Reject(
            ResponseCode.MESSAGE_ILLEGAL,
            f"message body is {len(body)} bytes; the broker accepts at most {DEFAULT_MAX_BODY_BYTES}",
        )


class SendProcessor:
    def __init__(
        self,
        store: MessageStore,
        topics: TopicTable,
        faults: Faults,
        *,
        cluster: str,
        rng: random.Random | None = None,
        sleep: Callable[[float], Awaitable[None]] = asyncio.sleep,
        transactions: Transactions | None = None,
        schedule: Schedule | None = None,  # None: a DELAY level is ignored (stored at once)
    ) -> None:
        self._store = store
        self._schedule = schedule
        self._transactions = transactions
        self._topics = topics
        self._faults = faults
        self._cluster_item = f"CLUSTER\x01{cluster}"
        self._rng = rng or random.Random()
        self._sleep = sleep

    async def send(self, conn: Connection, cmd: RemotingCommand) -> RemotingCommand:
        ext = {"MSG_REGION": REGION, "TRACE_ON": "true"}  # every 4.x broker sets both first
        if self._faults.latency_s > 0:
            await self._sleep(self._faults.latency_s)
        failure = self._faults.take_failure()
        if failure is not None:
            return cmd.response(failure[0], failure[1], ext)
        try:
            header = SendHeader.parse(cmd.ext_fields, letters=cmd.code != RequestCode.SEND_MESSAGE)
            queue_id = self._target_queue(header)
            born_host = conn.peer_host if isinstance(conn, ServerConnection) else _UNKNOWN_HOST
            if cmd.code == RequestCode.SEND_BATCH_MESSAGE:
                topic, store_queue = header.topic, queue_id
                _undelayed_batch(header)
                messages = self._batch(header, cmd.body, born_host)
            else:
                topic, store_queue = self._retry_or_dlq(header, queue_id, cmd)
                messages = [self._single(header, cmd.body, born_host)]
            level = self._delay_level(cmd, messages)
        except Reject as exc:
            return cmd.response(exc.code, exc.remark, ext)
        # The answer names ``queue_id`` even when the message went elsewhere (a half, a DLQ), as Java's
        # handlePutMessageResult answers the queue id chosen before.
        if (
            self._transactions is not None
            and len(messages) == 1
            and self._transactions.is_half(messages[0].properties)
        ):
            half = self._transactions.half(topic, store_queue, messages[0])
            appended = self._store.put(HALF_TOPIC, 0, [half])
        elif level > 0 and self._schedule is not None:
            appended = [self._schedule.put(scheduled(messages[0], topic, store_queue, level), level)]
        else:
            appended = self._store.put(topic, store_queue, messages)
        ext["msgId"] = ",".join(a.msg_id for a in appended)
        ext["queueId"] = str(queue_id)
        ext["queueOffset"] = str(appended[0].queue_offset)
        return cmd.response(ResponseCode.SUCCESS, None, ext)

    def _delay_level(self, cmd: RemotingCommand, messages: list[NewMessage]) -> int:
        """CommitLog.asyncPutMessage: the DELAY level (capped at the last one) of a single message that
        is neither a half nor, by its system flag, a prepared or rolled-back one; else 0 (a batch's is
        refused before: _undelayed_batch).

        Raises:
            Reject: SYSTEM_ERROR for a DELAY that is not an integer (_delay_of).
        """
        if cmd.code == RequestCode.SEND_BATCH_MESSAGE:
            return 0
        (msg,) = messages
        if Transactions.is_half(msg.properties) or msg.sys_flag & TRANSACTION_BITS not in (
            TRANSACTION_NOT_TYPE,
            TRANSACTION_COMMIT_TYPE,
        ):
            return 0
        return min(_delay_of(msg.properties), MAX_DELAY_LEVEL)

    def _target_queue(self, h: SendHeader) -> int:
        error = topic_name_error(h.topic)
        if error is not None:
            raise Reject(ResponseCode.SYSTEM_ERROR, error)
        if h.topic in NOT_ALLOWED_SEND_TOPICS:
            raise Reject(ResponseCode.NO_PERMISSION, f"Sending message to topic[{h.topic}] is forbidden.")
        cfg = self._topic(h)
        if h.queue_id < 0:
            return self._rng.randrange(cfg.write_queue_nums or cfg.queue_count)
        if h.queue_id >= cfg.queue_count:
            raise Reject(
                ResponseCode.SYSTEM_ERROR,
                f"request queueId[{h.queue_id}] is illegal, topic {h.topic} has {cfg.queue_count} queues",
            )
        return h.queue_id

    def _retry_or_dlq(self, h: SendHeader, queue_id: int, cmd: RemotingCommand) -> tuple[str, int]:
        """handleRetryAndDLQ: where a single message is stored. One sent to ``%RETRY%<group>`` (by a
        consumer whose send-back failed) with reconsume times at the maximum goes to the group's DLQ
        instead, else it would be redelivered for ever. Its properties and reconsume times stay as sent:
        Java's setDelayTimeLevel(0) there is overwritten by the header's properties set after it (so a
        DELAY sent, as Java's consumer sends 3 + reconsume times, has 4.9.4 schedule the copy into the
        DLQ, and devbroker too: _delay_level)."""
        if not h.topic.startswith(RETRY_PREFIX):
            return h.topic, queue_id
        if h.reconsume_times < max_reconsume_times(cmd, h.max_reconsume_times):
            return h.topic, queue_id
        return dlq_topic(self._topics, h.topic[len(RETRY_PREFIX) :]), DLQ_QUEUE_ID

    def _topic(self, h: SendHeader) -> TopicConfig:
        cfg = self._topics.get(h.topic)
        if cfg is None:
            cfg = self._topics.auto_create(h.topic, h.default_topic, h.default_queue_nums, 0)
        if cfg is None and h.topic.startswith(RETRY_PREFIX):
            cfg = self._topics.ensure(h.topic)
        if cfg is None:
            raise Reject(ResponseCode.TOPIC_NOT_EXIST, f"topic[{h.topic}] not exist, apply first please!")
        return cfg

    def _single(self, h: SendHeader, body: bytes, born_host: bytes) -> NewMessage:
        _check_body(body)
        props, tags = stored_properties(h.properties, [self._cluster_item])
        return NewMessage(
            body, h.flag, h.sys_flag, h.born_timestamp_ms, born_host, props, tag_code(tags), h.reconsume_times
        )

    def _batch(self, h: SendHeader, body: bytes, born_host: bytes) -> list[NewMessage]:
        # 4.9.4 stores a batch to a %RETRY% topic like any other (its sendBatchMessage has no
        # handleRetryAndDLQ: no group check, no DLQ) and keeps the reconsume times of the header.
        try:
            records = decode_batch(body)
        except FrameError as exc:
            raise Reject(ResponseCode.MESSAGE_ILLEGAL, str(exc)) from None
        if not records:
            raise Reject(ResponseCode.MESSAGE_ILLEGAL, "the batch holds no message")
        # MessageExtBatchEncoder: every inner message's properties as sent, then the batch's (the
        # header's, WAIT included, and CLUSTER) after a separator.
        suffix = "\x02".join([p for p in h.properties.split("\x02") if p] + [self._cluster_item])
        out = []
        for rec in records:
            _check_body(rec.body)
            props, tags = batch_item_properties(rec.properties, suffix)
            out.append(
                NewMessage(
                    rec.body,
                    rec.flag,
                    h.sys_flag,
                    h.born_timestamp_ms,
                    born_host,
                    props,
                    tag_code(tags),
                    h.reconsume_times,
                )
            )
        return out


def batch_item_properties(inner: str, batch: str) -> tuple[str, str | None]:
    """(properties as stored, TAGS value) of one message of a batch: its own properties verbatim (WAIT
    too), a separator unless they end with one, then the batch's; TAGS is the last one, as the store's
    properties map keeps it."""
    text = inner + "\x02" + batch if inner and not inner.endswith("\x02") else inner + batch
    if len(text) > PROPERTIES_MAX_BYTES // 4 and len(text.encode()) > PROPERTIES_MAX_BYTES:
        raise Reject(ResponseCode.MESSAGE_ILLEGAL, f"message properties exceed {PROPERTIES_MAX_BYTES} bytes")
    tags = None
    for item in text.split("\x02"):
        if item.startswith("TAGS\x01"):
            tags = item[5:]
    return text, tags
