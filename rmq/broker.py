"""Typed requests to a broker: send (single and batch), pull, heartbeat, offsets, groups, topics.

Each method builds the request header the Java broker expects (protocol reference §3, §5, §6), sends it
through an Invoker and turns the response into a value or a typed error.
"""

from __future__ import annotations

import zlib
from collections.abc import Sequence
from dataclasses import dataclass, field
from time import time_ns
from typing import Any

import orjson

from .clock import wall_ms
from .codes import (
    DEFAULT_TOPIC,
    DEFAULT_TOPIC_QUEUE_NUMS,
    PULL_SUBSCRIPTION,
    PULL_SUSPEND,
    SYSFLAG_COMPRESSED,
    SYSFLAG_COMPRESSION_ZLIB,
    SYSFLAG_TRANSACTION_PREPARED,
    RequestCode,
    ResponseCode,
)
from .errors import FrameError, InvalidMessageError, for_code
from .message import (
    NAME_VALUE_SEP,
    PROPERTY_PGROUP,
    PROPERTY_SEP,
    PROPERTY_TAGS,
    PROPERTY_TRAN_MSG,
    Message,
    MessageExt,
    MessageQueue,
    decode_properties,
)
from .message_codec import (
    MAX_BODY_BYTES,
    PullBody,
    StoredRecord,
    encode_batch,
    pull_messages,
    pull_records,
)
from .pool import Invoker
from .protocol.frame import RemotingCommand
from .protocol.numbers import INT64_MAX, INT64_MIN, java_int
from .result import PULL_STATUS_BY_CODE, STATUS_BY_CODE, PullResult, SendResult

_QUEUE_NUMS = str(DEFAULT_TOPIC_QUEUE_NUMS)  # the "d" of every send's header
_MAX_PLAIN_DIGITS = 18  # decimal text this long or shorter is a Java long: no bound check needed
DEFAULT_COMPRESS_OVER_BYTES = 4096  # the Java producer's compressMsgBodyOverHowmuch
PULL_TIMEOUT_MARGIN_S = 10.0  # a held pull may be answered ~5 s after its suspend time


def java_string_hash(text: str) -> int:
    """Java's String.hashCode over UTF-16 code units (tag codes in subscriptions, sharding keys)."""
    h = 0
    try:
        data = text.encode("utf-16-be")
    except UnicodeEncodeError:
        # A lone surrogate: one UTF-16 unit in a Java String, hashed as such. Only on this path: passing
        # "surrogatepass" on every call costs ~90 ns more (the codec call builds the errors str).
        data = text.encode("utf-16-be", "surrogatepass")
    for i in range(0, len(data), 2):
        h = (31 * h + ((data[i] << 8) | data[i + 1])) & 0xFFFFFFFF
    return h - (1 << 32) if h & 0x80000000 else h


EXPRESSION_TAG = "TAG"
EXPRESSION_SQL92 = "SQL92"
EXPRESSION_TYPES = (EXPRESSION_TAG, EXPRESSION_SQL92)  # Java's ExpressionType


def parse_tags(expression: str | None) -> list[str]:
    if not expression or expression.strip() == "*":
        return []
    return [t.strip() for t in expression.split("||") if t.strip()]


@dataclass(frozen=True, slots=True)
class Subscription:
    topic: str
    expression: str = "*"
    sub_version: int = field(default_factory=wall_ms)
    expression_type: str = EXPRESSION_TAG  # or EXPRESSION_SQL92: the broker evaluates it on properties

    @property
    def is_tag(self) -> bool:
        return self.expression_type == EXPRESSION_TAG

    def to_json(self) -> dict[str, Any]:
        # FilterAPI.build: only a TAG expression is split into tags and their hash codes
        tags = parse_tags(self.expression) if self.is_tag else []
        return {
            "classFilterMode": False,
            "topic": self.topic,
            "subString": (self.expression or "*") if self.is_tag else self.expression,
            "tagsSet": tags,
            "codeSet": [java_string_hash(t) for t in tags],
            "subVersion": self.sub_version,
            "expressionType": self.expression_type,
        }


@dataclass(frozen=True, slots=True)
class ConsumerData:
    group: str
    subscriptions: tuple[Subscription, ...] = ()
    message_model: str = "CLUSTERING"
    consume_type: str = "CONSUME_ACTIVELY"
    consume_from_where: str = "CONSUME_FROM_LAST_OFFSET"

    def to_json(self) -> dict[str, Any]:
        return {
            "groupName": self.group,
            "consumeType": self.consume_type,
            "messageModel": self.message_model,
            "consumeFromWhere": self.consume_from_where,
            "unitMode": False,
            "subscriptionDataSet": [s.to_json() for s in self.subscriptions],
        }


def half_properties(group: str) -> str:
    """What makes a message the half of a transaction: TRAN_MSG and the producer group (PGROUP) whose
    clients the broker asks when the transaction stays undecided."""
    sep, eq = PROPERTY_SEP, NAME_VALUE_SEP
    return f"{sep}{PROPERTY_TRAN_MSG}{eq}true{sep}{PROPERTY_PGROUP}{eq}{group}"


def _check(resp: RemotingCommand, addr: str, ok: tuple[int, ...] = (ResponseCode.SUCCESS,)) -> None:
    if resp.code not in ok:
        raise for_code(resp.code, resp.remark, addr)


MAX_CONSUMER_IDS = 10_000  # members of one group a broker may list (each is allocated queues, asked...)


def _int_field(resp: RemotingCommand, name: str, addr: str, default: int | None = None) -> int:
    """A number of the broker's answer, as the Java long it is (``default`` when absent, if given):
    FrameError when it is missing, not decimal or out of range (an offset of 10**30 once became the
    next pull's offset and wedged the queue)."""
    text = resp.ext_fields.get(name)
    if text is None and default is not None:
        return default
    # The usual text, a few plain ASCII digits (within a Java long by its length), without java_int's
    # general parse: two of these a send (issue 32).
    if type(text) is str and len(text) <= _MAX_PLAIN_DIGITS and text.isdigit() and text.isascii():
        return int(text)
    number = java_int(text, INT64_MIN, INT64_MAX)
    if number is None:
        raise FrameError(f"response from {addr} lacks a valid {name!r}", addr=addr)
    return number


def _queue_header(mq: MessageQueue, **fields: str) -> dict[str, str]:
    """A request header naming ``mq`` (bname: the broker a static topic's logical queue lives on), plus
    ``fields``: every queue-level request names its queue alike."""
    return {"topic": mq.topic, "queueId": str(mq.queue_id), "bname": mq.broker_name, **fields}


# MessageSysFlag's transaction types: the commitOrRollback of END_TRANSACTION.
TRANSACTION_NOT_TYPE = 0x0
TRANSACTION_COMMIT_TYPE = 0x8
TRANSACTION_ROLLBACK_TYPE = 0xC


@dataclass(frozen=True, slots=True)
class EndTransaction:
    """EndTransactionRequestHeader: which half (group, its queue offset in the half topic, its commit-log
    offset) and the decision (one of the TRANSACTION_*_TYPE values)."""

    producer_group: str
    tran_state_table_offset: int
    commit_log_offset: int
    state: int
    msg_id: str
    transaction_id: str
    from_transaction_check: bool = False

    def header(self) -> dict[str, str]:
        return {
            "producerGroup": self.producer_group,
            "tranStateTableOffset": str(self.tran_state_table_offset),
            "commitLogOffset": str(self.commit_log_offset),
            "commitOrRollback": str(self.state),
            "fromTransactionCheck": "true" if self.from_transaction_check else "false",
            "msgId": self.msg_id,
            "transactionId": self.transaction_id,
        }


class BrokerApi:
    def __init__(
        self,
        invoker: Invoker,
        *,
        producer_group: str = "rocksidecar",
        compress_over_bytes: int = DEFAULT_COMPRESS_OVER_BYTES,
    ) -> None:
        self._invoker = invoker
        self.producer_group = producer_group
        self._compress_over = compress_over_bytes

    async def _checked(self, addr: str, cmd: RemotingCommand, timeout_s: float) -> RemotingCommand:
        """The broker's answer to ``cmd``; its error raised when the answer is not SUCCESS."""
        resp = await self._invoker.invoke(addr, cmd, timeout_s)
        _check(resp, addr)
        return resp

    async def _command(self, addr: str, cmd: RemotingCommand, timeout_s: float, *, oneway: bool) -> None:
        """``cmd`` one-way (no answer awaited, as Java sends offsets and decisions), or checked."""
        if oneway:
            await self._invoker.invoke_oneway(addr, cmd)
        else:
            await self._checked(addr, cmd, timeout_s)

    # sending ------------------------------------------------------------------------------------
    def _send_header(
        self, mq: MessageQueue, sys_flag: int, flag: int, properties: str, *, batch: bool, default_topic: str
    ) -> dict[str, str]:
        # SendMessageRequestHeaderV2: single letters, as codes 310 and 320 require. Flags are 0 but for a
        # compressed or transactional message: their text without a str() call each (issue 32).
        return {
            "a": self.producer_group,
            "b": mq.topic,
            "c": default_topic,
            "d": _QUEUE_NUMS,
            "e": str(mq.queue_id),
            "f": "0" if sys_flag == 0 else str(sys_flag),
            "g": str(time_ns() // 1_000_000),  # clock.wall_ms inline
            "h": "0" if flag == 0 else str(flag),
            "i": properties,
            "j": "0",
            "k": "false",
            "m": "true" if batch else "false",
            "n": mq.broker_name,
        }

    async def send(
        self,
        addr: str,
        mq: MessageQueue,
        msg: Message,
        uniq_key: str,
        timeout_s: float,
        default_topic: str = DEFAULT_TOPIC,
        *,
        half_of_group: str | None = None,
        reconsume_times: int = 0,
        max_reconsume_times: int | None = None,
    ) -> SendResult:
        """SEND_MESSAGE_V2 of one message to an explicit queue. ``half_of_group``: send it as the half
        (prepared) message of a transaction of that producer group, as TransactionMQProducer does; the
        broker keeps it invisible until END_TRANSACTION or its check-back decides. ``reconsume_times``
        and ``max_reconsume_times``: a consumer's failed message sent to its group's %RETRY% topic (the
        header fields j and l Java's producer fills from RECONSUME_TIME and MAX_RECONSUME_TIMES there):
        the broker stores that count, and moves the message to the DLQ once it reaches the maximum."""
        body, sys_flag = msg.body, 0
        if self._compress_over and len(body) > self._compress_over:
            body, sys_flag = zlib.compress(body, 5), SYSFLAG_COMPRESSED | SYSFLAG_COMPRESSION_ZLIB
        properties = msg.wire_properties(uniq_key)
        if half_of_group is not None:
            sys_flag |= SYSFLAG_TRANSACTION_PREPARED
            properties += half_properties(half_of_group)
        header = self._send_header(
            mq, sys_flag, msg.flag, properties, batch=False, default_topic=default_topic
        )
        if half_of_group is not None:
            header["a"] = half_of_group
        if reconsume_times:
            header["j"] = str(reconsume_times)
        if max_reconsume_times is not None:
            header["l"] = str(max_reconsume_times)
        cmd = RemotingCommand(RequestCode.SEND_MESSAGE_V2, header, body)
        resp = await self._invoker.invoke(addr, cmd, timeout_s)
        return self._send_result(resp, addr, mq, uniq_key)

    async def send_batch(
        self,
        addr: str,
        mq: MessageQueue,
        messages: Sequence[Message],
        uniq_keys: Sequence[str],
        timeout_s: float,
        default_topic: str = DEFAULT_TOPIC,
        properties: Sequence[str] | None = None,
    ) -> SendResult:
        """SEND_BATCH_MESSAGE: all messages to one queue; they get consecutive offsets. ``properties``:
        each message's ``wire_properties`` with its id, when the caller has them already."""
        if not messages or len(messages) != len(uniq_keys):
            raise InvalidMessageError(
                "a batch needs one id per message and at least one message", field="messages"
            )
        if {m.topic for m in messages} != {mq.topic}:
            raise InvalidMessageError("every message of a batch must have the batch's topic", field="topic")
        if properties is None:
            properties = [m.wire_properties(k) for m, k in zip(messages, uniq_keys, strict=True)]
        elif len(properties) != len(messages):
            raise ValueError("properties must have one entry per message")
        bodies, flags = [m.body for m in messages], [m.flag for m in messages]
        body = encode_batch(zip(bodies, flags, properties, strict=True))
        header = self._send_header(mq, 0, 0, "WAIT\x01true", batch=True, default_topic=default_topic)
        cmd = RemotingCommand(RequestCode.SEND_BATCH_MESSAGE, header, body)
        resp = await self._invoker.invoke(addr, cmd, timeout_s)
        return self._send_result(resp, addr, mq, ",".join(uniq_keys))

    @staticmethod
    def _send_result(resp: RemotingCommand, addr: str, mq: MessageQueue, msg_id: str) -> SendResult:
        status = STATUS_BY_CODE.get(resp.code)
        if status is None:
            raise for_code(resp.code, resp.remark, addr)
        ext = resp.ext_fields
        queue_id = _int_field(resp, "queueId", addr, mq.queue_id)
        offset = _int_field(resp, "queueOffset", addr)
        # The queue asked for (frozen, so shared safely) when the broker stored it there, as it does: a
        # frozen dataclass built per send costs ~1 us (issue 32).
        queue = mq if queue_id == mq.queue_id else MessageQueue(mq.topic, mq.broker_name, queue_id)
        return SendResult(
            status,
            msg_id,
            ext.get("msgId", ""),
            queue,
            offset,
            ext.get("MSG_REGION", "DefaultRegion"),
            ext.get("TRACE_ON", "true") != "false",
        )

    # pulling ------------------------------------------------------------------------------------
    async def pull(
        self,
        addr: str,
        group: str,
        mq: MessageQueue,
        offset: int,
        *,
        max_nums: int = 32,
        expression: str = "*",
        suspend_s: float = 0.0,
        commit_offset: int | None = None,
        timeout_s: float | None = None,
        subscribe: bool = True,
        sub_version: int = 0,
        expression_type: str = EXPRESSION_TAG,
        as_records: bool = False,
        max_body_bytes: int = MAX_BODY_BYTES,
    ) -> PullResult:
        """PULL_MESSAGE; with ``suspend_s`` > 0 the broker holds the request until a message arrives.

        With ``subscribe`` False the broker filters by the subscription of the group's heartbeat (as
        Java's push consumer pulls); ``expression`` still re-filters the exact tags here.
        ``as_records``: the result holds ``records`` (message_codec.pull_records, for bulk readers)
        instead of ``messages``. A compressed body is inflated up to ``max_body_bytes``.

        One bad record never fails the pull: one whose body does not inflate (or text does not decode)
        is left out and listed in ``undecodable``; at one whose frame is corrupt the body cannot be
        walked further, so next_begin_offset becomes the offset after the last record read (the next
        pull starts at the corrupt one); when it is the first, it is fetched again alone, and if still
        corrupt its offsets are skipped (``corrupt`` says so). No offset holding a good message is
        skipped."""
        sys_flag = (PULL_SUBSCRIPTION if subscribe else 0) | (PULL_SUSPEND if suspend_s > 0 else 0)
        if commit_offset is not None:
            sys_flag |= 0x1
        header = _queue_header(
            mq,
            consumerGroup=group,
            queueOffset=str(offset),
            maxMsgNums=str(max_nums),
            sysFlag=str(sys_flag),
            commitOffset=str(commit_offset or 0),
            suspendTimeoutMillis=str(int(suspend_s * 1000)),
            subscription=expression or "*",
            subVersion=str(sub_version),
            expressionType=expression_type,
        )
        timeout = timeout_s if timeout_s is not None else suspend_s + PULL_TIMEOUT_MARGIN_S
        resp = await self._invoker.invoke(addr, RemotingCommand(RequestCode.PULL_MESSAGE, header), timeout)
        status = PULL_STATUS_BY_CODE.get(resp.code)
        if status is None:
            raise for_code(resp.code, resp.remark, addr)
        tags = set(parse_tags(expression)) if expression_type == EXPRESSION_TAG else set()
        messages: list[MessageExt] = []
        records: list[StoredRecord] = []
        walked: PullBody[MessageExt] | PullBody[StoredRecord]
        # A broker answers at most maxMsgNums records (4.9.4's isTheBatchFull takes one even for 0; it may
        # answer fewer), in consume-queue order: strictly ascending (a tag or SQL filter skips offsets).
        # The walk stops at a record that breaks this (one past the count is not inflated); see below.
        most = max(1, max_nums)
        if as_records:
            walked = got = pull_records(resp.body, max_body_bytes, most)
            records = got.items
            if tags:  # the broker filters by tag hash only; re-filter by the exact tag, as Java does
                records = [r for r in records if decode_properties(r[2]).get(PROPERTY_TAGS) in tags]
        else:
            walked = ext = pull_messages(resp.body, max_body_bytes, most)
            messages = ext.items
            if tags:
                messages = [m for m in messages if m.tags in tags]
        next_begin = _int_field(resp, "nextBeginOffset", addr)
        max_offset = _int_field(resp, "maxOffset", addr)
        # A broker never sends the next pull past its queue's end (a slave may leave it at the offset
        # asked): further would skip messages never seen.
        if not 0 <= next_begin <= max(max_offset, offset):
            raise FrameError(
                f"pull answer from {addr} for {mq}: nextBeginOffset {next_begin} outside [0, "
                f"max(maxOffset {max_offset}, offset asked {offset})]",
                addr=addr,
            )
        undecodable = walked.undecodable
        corrupt = walked.corrupt
        read = [u.message.queue_offset for u in undecodable]  # every record's offset, ours or not
        read += [r[0] for r in got.items] if as_records else [m.queue_offset for m in ext.items]
        if corrupt is not None:
            last = max(read, default=None)
            if last is not None:  # the corrupt record follows: the next pull starts at it
                next_begin, corrupt = min(next_begin, last + 1), None
            elif max_nums > 1:  # the first record: fetch it alone, to skip only its own offsets
                return await self.pull(
                    addr, group, mq, offset, max_nums=1, expression=expression, suspend_s=0.0,
                    commit_offset=commit_offset, timeout_s=timeout_s, subscribe=subscribe,
                    sub_version=sub_version, expression_type=expression_type, as_records=as_records,
                    max_body_bytes=max_body_bytes,
                )  # fmt: skip
        if read and not offset <= min(read) <= max(read) < next_begin:
            # Every record of a pull lies in [offset asked, nextBeginOffset), as a 4.x broker stores and
            # answers them (5.x's static topics shift them by an offsetDelta, which is not supported).
            # Taken as they claim, one beyond would be committed past offsets never pulled, one far
            # beyond would wedge the queue behind the commit window, and records with a next offset
            # that does not move would come again and again.
            raise FrameError(
                f"pull answer from {addr} for {mq} at offset {offset}: records at offsets {min(read)}.."
                f"{max(read)}, outside [{offset}, nextBeginOffset {next_begin})",
                addr=addr,
            )
        if walked.refused is not None:
            # Taken, an answer that reorders, repeats or multiplies records does harm: descending, it
            # wedges the commit window and can skip an undecodable record whose send-back failed; a
            # repeated offset reaches the listener twice; more than asked inflates up to max_body_bytes a
            # record past what flow control let through.
            raise FrameError(
                f"pull answer from {addr} for {mq} at offset {offset}: {walked.refused}", addr=addr
            )
        if tags and undecodable:  # the ones whose properties decoded and name another tag are not ours
            undecodable = [u for u in undecodable if u.message.tags in tags or not u.message.properties]
        return PullResult(
            status=status,
            next_begin_offset=next_begin,
            min_offset=_int_field(resp, "minOffset", addr),
            max_offset=max_offset,
            suggest_which_broker_id=_int_field(resp, "suggestWhichBrokerId", addr, 0),
            messages=messages,
            records=records,
            undecodable=undecodable,
            corrupt=corrupt,
        )

    # offsets ------------------------------------------------------------------------------------
    async def _offset_call(self, addr: str, code: int, header: dict[str, str], timeout_s: float) -> int:
        resp = await self._checked(addr, RemotingCommand(code, header), timeout_s)
        return _int_field(resp, "offset", addr)

    async def get_max_offset(self, addr: str, mq: MessageQueue, timeout_s: float = 3.0) -> int:
        return await self._offset_call(addr, RequestCode.GET_MAX_OFFSET, _queue_header(mq), timeout_s)

    async def get_min_offset(self, addr: str, mq: MessageQueue, timeout_s: float = 3.0) -> int:
        return await self._offset_call(addr, RequestCode.GET_MIN_OFFSET, _queue_header(mq), timeout_s)

    async def search_offset(
        self, addr: str, mq: MessageQueue, timestamp_ms: int, timeout_s: float = 3.0
    ) -> int:
        header = _queue_header(mq, timestamp=str(timestamp_ms))
        return await self._offset_call(addr, RequestCode.SEARCH_OFFSET_BY_TIMESTAMP, header, timeout_s)

    async def query_consumer_offset(
        self, addr: str, group: str, mq: MessageQueue, timeout_s: float = 3.0
    ) -> int | None:
        """The group's committed offset, or None when the group never committed (QUERY_NOT_FOUND)."""
        header = _queue_header(mq, consumerGroup=group)
        resp = await self._invoker.invoke(
            addr, RemotingCommand(RequestCode.QUERY_CONSUMER_OFFSET, header), timeout_s
        )
        if resp.code == ResponseCode.QUERY_NOT_FOUND:
            return None
        _check(resp, addr)
        return _int_field(resp, "offset", addr)

    async def update_consumer_offset(
        self,
        addr: str,
        group: str,
        mq: MessageQueue,
        offset: int,
        *,
        oneway: bool = False,
        timeout_s: float = 3.0,
    ) -> None:
        header = _queue_header(mq, consumerGroup=group, commitOffset=str(offset))
        cmd = RemotingCommand(RequestCode.UPDATE_CONSUMER_OFFSET, header)
        await self._command(addr, cmd, timeout_s, oneway=oneway)

    # clients and groups -------------------------------------------------------------------------
    async def heartbeat(
        self,
        addr: str,
        client_id: str,
        producer_groups: Sequence[str] = (),
        consumers: Sequence[ConsumerData] = (),
        timeout_s: float = 3.0,
    ) -> int:
        """HEART_BEAT; returns the broker's version ordinal."""
        body = orjson.dumps(
            {
                "clientID": client_id,
                "producerDataSet": [{"groupName": g} for g in producer_groups],
                "consumerDataSet": [c.to_json() for c in consumers],
            }
        )
        resp = await self._checked(addr, RemotingCommand(RequestCode.HEART_BEAT, {}, body), timeout_s)
        return resp.version

    async def end_transaction(
        self,
        addr: str,
        end: EndTransaction,
        *,
        oneway: bool = False,
        timeout_s: float = 3.0,
    ) -> None:
        """END_TRANSACTION: commit or roll back the half message ``end`` names. Java sends it one-way;
        with ``oneway`` False the broker's answer says whether it took the decision (it answers a
        commit or rollback, never an UNKNOWN one, which is therefore always sent one-way)."""
        cmd = RemotingCommand(RequestCode.END_TRANSACTION, end.header())
        await self._command(addr, cmd, timeout_s, oneway=oneway or end.state == TRANSACTION_NOT_TYPE)

    async def unregister_client(
        self,
        addr: str,
        client_id: str,
        *,
        producer_group: str | None = None,
        consumer_group: str | None = None,
        timeout_s: float = 3.0,
    ) -> None:
        header = {"clientID": client_id}
        if producer_group:
            header["producerGroup"] = producer_group
        if consumer_group:
            header["consumerGroup"] = consumer_group
        await self._checked(addr, RemotingCommand(RequestCode.UNREGISTER_CLIENT, header), timeout_s)

    async def get_consumer_list(self, addr: str, group: str, timeout_s: float = 3.0) -> list[str]:
        """Client ids in a consumer group; an empty list when the broker knows no member."""
        resp = await self._invoker.invoke(
            addr, RemotingCommand(RequestCode.GET_CONSUMER_LIST_BY_GROUP, {"consumerGroup": group}), timeout_s
        )
        if resp.code == ResponseCode.SYSTEM_ERROR and "no consumer" in (resp.remark or ""):
            return []
        _check(resp, addr)
        try:
            ids = orjson.loads(resp.body).get("consumerIdList") or [] if resp.body else []
        except (orjson.JSONDecodeError, AttributeError) as exc:
            raise FrameError(f"undecodable consumer list from {addr}: {exc}", addr=addr) from exc
        if not isinstance(ids, list) or not all(isinstance(i, str) and i for i in ids):
            raise FrameError(f"consumer list from {addr} is not a list of client ids", addr=addr)
        if len(ids) > MAX_CONSUMER_IDS:
            raise FrameError(
                f"consumer list from {addr} names {len(ids)} members of {group}, over {MAX_CONSUMER_IDS}",
                addr=addr,
            )
        return ids

    async def get_consumer_running_info(
        self, addr: str, group: str, client_id: str, timeout_s: float = 3.0
    ) -> bytes:
        """GET_CONSUMER_RUNNING_INFO through the broker, which asks the client over its connection
        (as ``mqadmin consumerStatus``); the client's ConsumerRunningInfo JSON."""
        header = {"consumerGroup": group, "clientId": client_id, "jstackEnable": "false"}
        resp = await self._checked(
            addr, RemotingCommand(RequestCode.GET_CONSUMER_RUNNING_INFO, header), timeout_s
        )
        return resp.body

    async def create_topic(
        self,
        addr: str,
        topic: str,
        *,
        read_queue_nums: int = 4,
        write_queue_nums: int = 4,
        perm: int = 6,
        order: bool = False,
        timeout_s: float = 3.0,
    ) -> None:
        header = {
            "topic": topic,
            "defaultTopic": DEFAULT_TOPIC,
            "readQueueNums": str(read_queue_nums),
            "writeQueueNums": str(write_queue_nums),
            "perm": str(perm),
            "topicFilterType": "SINGLE_TAG",
            "topicSysFlag": "0",
            "order": "true" if order else "false",
        }
        await self._checked(addr, RemotingCommand(RequestCode.UPDATE_AND_CREATE_TOPIC, header), timeout_s)
