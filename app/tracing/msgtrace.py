"""RocketMQ's own message trace (what the Java client's ``enableMsgTrace`` writes): send (``Pub``, of a
transaction's half too), consume (``SubBefore``/``SubAfter``) and ``EndTransaction`` records in
``TraceDataEncoder``'s format (read back by its decoder: tests/app/tracing/test_msgtrace_java_parity.py),
batched into messages on the trace topic (``RMQ_SYS_TRACE_TOPIC``) keyed by message id and keys, as
``AsyncTraceDispatcher`` does, so that ``mqadmin queryMsgTraceById`` and the RocketMQ Dashboard show the
sidecar's sends and deliveries beside those of Java clients.

Off unless ``ROCKSIDECAR_MSG_TRACE=true``. Recording never waits and never fails a send: a send leaves a
tuple of the few strings and numbers its record needs (not the message: a buffered record holds no body)
in a bounded buffer; when the buffer is full the oldest is dropped and counted (``dropped``), the send
goes on. One timer per flush (the first record after a flush arms it, the others ride along) wakes a
background task that builds the records' text, cuts it into trace messages of at most MAX_RECORDS records
(Java's batch size) and sends them all in one SEND_BATCH_MESSAGE on a producer of its own, as Java's
``traceProducer`` (app.wiring.trace_producer: the sidecar's connections, its own routes and fault table,
so a broker refusing the trace topic is never isolated for the app's sends). The bodies go
uncompressed: zlib at level 5 cost more CPU than the rest of a trace message's send (session 11's
profile), and a body without the compressed sysflag is as valid to every reader (the broker,
``queryMsgTraceById``, the Dashboard); the batch format compresses none.
"""

from __future__ import annotations

import asyncio
import logging
import uuid
from collections import deque
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from time import time_ns
from typing import Any

from rocksidecar.rmq import Message, SendResult
from rocksidecar.rmq.broker import EndTransaction
from rocksidecar.rmq.message import MessageExt
from rocksidecar.rmq.message_codec import _host_text
from rocksidecar.rmq.producer.transaction import TransactionState
from rocksidecar.rmq.result import SendStatus
from rocksidecar.rmq.sender import BatchResults

from .watched import WatchedSender

log = logging.getLogger(__name__)

DEFAULT_TOPIC = "RMQ_SYS_TRACE_TOPIC"
CONTENT = "\x01"  # TraceConstants.CONTENT_SPLITOR
FIELD = "\x02"  # TraceConstants.FIELD_SPLITOR
MAX_RECORDS = 100  # records per trace message: AsyncTraceDispatcher's batchSize (a reader decodes them all)
MAX_MESSAGE_BYTES = 128_000  # a trace message's body at most: AsyncTraceDispatcher's maxMsgSize
# A trace message's KEYS property, in bytes of UTF-8: a batch record's properties (KEYS, UNIQ_KEY, WAIT and
# the broker's own items) must stay within PROPERTIES_MAX_BYTES (32767), and a key that is not ASCII takes
# up to 3 bytes a character. In characters it is within this bound too.
MAX_KEYS_BYTES = MAX_KEYS_CHARS = 16_000
KEYS_FULL = MAX_KEYS_BYTES - 256  # a trace message takes no more records once its keys reach this
MAX_PER_WRITE = 2_000  # records per SEND_BATCH_MESSAGE call (20 trace messages, ~400 KB)
MAX_BUFFERED = 20_000  # records waiting; beyond, the oldest go (a trace must never hold memory hostage)
FLUSH_S = 0.05
CLOSE_S = 2.0  # close's flush at most: a broker that does not answer must not hold the sidecar's stop
# TraceDataEncoder's MessageType ordinals: Normal_Msg, Trans_Msg_Half, Trans_msg_Commit, Delay_Msg
MSG_TYPE_NORMAL, MSG_TYPE_HALF, MSG_TYPE_COMMIT, MSG_TYPE_DELAY = 0, 1, 2, 3
SUCCESS, FAILED = 0, 4  # ConsumeReturnType ordinals (contextCode)
_PUB, _SUB, _END = 0, 1, 2  # what a buffered tuple is (its first item)
# EndTransaction's transactionState: Java's LocalTransactionState names, by the commitOrRollback sent
_STATE_NAMES = {
    TransactionState.COMMIT.value: "COMMIT_MESSAGE",
    TransactionState.ROLLBACK.value: "ROLLBACK_MESSAGE",
    TransactionState.UNKNOWN.value: "UNKNOW",
}


@dataclass(frozen=True, slots=True)
class Record:
    data: str  # one or more encoded records, each ending with FIELD
    keys: tuple[str, ...]  # the message id, then its keys: what the trace message is found by


_hosts: dict[str, str] = {}  # an offset id's host part (its hex before the offset) -> ip:port; a few brokers


def _store_host(offset_msg_id: str) -> str:
    """``ip:port`` of the broker, read from the offset message id: its packed store host (an IPv4 address
    and port, 16 hex digits, or an IPv6 one, 40) before the 16 digits of the commit-log offset, decoded
    as rmq.message_codec decodes a stored message's store host (``[v6]:port`` for IPv6). The store host
    rather than the address the send went to (Java's getBrokerAddr()): the sidecar's SendResult does not
    carry that address, and the broker's own storeHost is what its offset id and queryMsgById name. An id
    of neither length (not a broker's) names no host."""
    head = offset_msg_id[:-16]
    host = _hosts.get(head)
    if host is None:
        try:  # fromhex skips white space: the packed host's length is checked, not only the id's
            raw = bytes.fromhex(head) if len(offset_msg_id) in (32, 56) else b""
        except ValueError:
            raw = b""
        host = _host_text(raw) if len(raw) in (8, 20) else ""
        if len(_hosts) < 1024:  # bounded: the ids come from brokers, not from us
            _hosts[head] = host
    return host


# What a send leaves in the buffer: _PUB, topic, tags, keys, body size, message type, msg id, offset id,
# region, started (ms), cost (ms), SEND_OK, group (None: the dispatcher's). A delivery: _SUB, msg id, keys,
# reconsume times, region, ok, started, cost, group, ended (ms). A transaction's end: _END, topic, tags,
# keys, msg id, broker address, transaction id, state name, from check, region, time (ms), group. Strings
# and numbers only: no body is held, and the tuples are untracked by the GC.
_Pending = tuple[Any, ...]
_SEND_OK = SendStatus.SEND_OK


def _sent(
    msg: Message, result: SendResult, started_ms: int, cost_ms: int, half_of: str | None = None
) -> _Pending:
    """Java's success is ``status == SEND_OK``: a degraded store (FLUSH_DISK_TIMEOUT, FLUSH_SLAVE_TIMEOUT,
    SLAVE_NOT_AVAILABLE), which the producer hands back as a send's outcome, is a failed Pub.
    ``half_of``: the transaction group of a half message (TransactionTrace: Trans_Msg_Half, that group);
    None: the message's own type, the dispatcher's group."""
    if half_of is not None:
        msg_type = MSG_TYPE_HALF
    else:
        msg_type = MSG_TYPE_DELAY if "DELAY_DUE_AT" in msg.properties else MSG_TYPE_NORMAL
    return (_PUB, msg.topic, msg.tags, msg.keys, len(msg.body), msg_type, result.msg_id,
            result.offset_msg_id, result.region_id, started_ms, cost_ms,
            result.status is _SEND_OK, half_of)  # fmt: skip


def _consumed(
    msg: MessageExt,
    group: str,
    started_ms: int,
    cost_ms: int,
    ok: bool,
    region: str | None = None,
    ended_ms: int | None = None,
) -> _Pending:
    """``region``: the message's own (MSG_REGION) when not given. ``ended_ms``: when its delivery ended,
    SubAfter's timestamp (started + cost when not given; not so for a batch, whose cost is shared out)."""
    if region is None:
        region = msg.properties.get("MSG_REGION", "DefaultRegion")
    ended = started_ms + cost_ms if ended_ms is None else ended_ms
    return (_SUB, msg.msg_id, msg.keys, msg.reconsume_times, region, ok, started_ms, cost_ms, group, ended)


def _pub_text(p: _Pending, group: str) -> str:
    """The Pub record's text: its fields in TraceDataEncoder's order, CONTENT between them, FIELD after
    (one f-string: a third of the cost of a tuple of str() joined). No tags or keys are "null", as Java
    appends a null (see _sub_text)."""
    _, topic, tags, keys, size, msg_type, msg_id, offset_id, region, started, cost, ok, own_group = p
    return (
        f"Pub\x01{started}\x01{region}\x01{own_group or group}\x01{topic}\x01{msg_id}\x01{tags or 'null'}\x01"
        f"{' '.join(keys) or 'null'}\x01{_store_host(offset_id)}\x01{size}\x01{cost}\x01{msg_type}\x01"
        f"{offset_id}\x01{'true' if ok else 'false'}\x02"
    )


def _sub_text(p: _Pending) -> str:
    """The SubBefore and SubAfter records of one consumed message, under one request id. A message without
    keys has "null" for them, as Java appends msg.getKeys()'s null: an empty field ending SubBefore is
    dropped by Java's String.split, and decoderFromTraceDataString then throws for the whole trace
    message (queryMsgTraceById and the Dashboard fail on every record in it). SubAfter's timestamp is
    when the delivery ended."""
    _, msg_id, keys, reconsume, region, ok, started, cost, group, ended = p
    request_id = uuid.uuid4().hex.upper()
    joined = " ".join(keys) or "null"
    return (
        f"SubBefore\x01{started}\x01{region}\x01{group}\x01{request_id}\x01{msg_id}\x01{reconsume}\x01"
        f"{joined}\x02SubAfter\x01{request_id}\x01{msg_id}\x01{cost}\x01{'true' if ok else 'false'}\x01"
        f"{joined}\x01{SUCCESS if ok else FAILED}\x01{ended}\x01{group}\x02"
    )


def _end_text(p: _Pending) -> str:
    """The EndTransaction record (encoderFromContextBean's 13 fields): message type Trans_msg_Commit
    whatever the state, as EndTransactionTraceHookImpl writes it; the broker address as its storeHost."""
    _, topic, tags, keys, msg_id, addr, tx_id, state, from_check, region, at, group = p
    return (
        f"EndTransaction\x01{at}\x01{region}\x01{group}\x01{topic}\x01{msg_id}\x01{tags or 'null'}\x01"
        f"{' '.join(keys) or 'null'}\x01{addr}\x01{MSG_TYPE_COMMIT}\x01{tx_id}\x01{state}\x01"
        f"{'true' if from_check else 'false'}\x02"
    )


# A well-formed record's separators: Pub has 14 fields; SubBefore 8 and SubAfter 9; EndTransaction 13; each
# ended by FIELD.
_PUB_CONTENTS, _SUB_CONTENTS, _END_CONTENTS = 13, 15, 12
_NO_SEPARATORS = str.maketrans("", "", CONTENT + FIELD)


def _record(p: _Pending, group: str) -> tuple[str, tuple[str, ...]]:
    """A buffered tuple's records and the keys its trace message is found by (its message id first).

    A consumed message's id (UNIQ_KEY), keys and region are what its producer wrote (Java's client does
    not check keys; a property value keeps a CONTENT after its first), and a broker's answer is as
    foreign: a separator in one of them adds fields, Java's decoderFromTraceDataString then throws on a
    number out of place and the whole trace message (up to MAX_RECORDS records) is lost to its readers.
    So the text is checked by counting its separators (two C scans, on this task, not on the send); a
    record with extra ones is built again with them taken out of every string."""
    if p[0] == _PUB:
        text = _pub_text(p, group)
        if text.count(CONTENT) != _PUB_CONTENTS or text.count(FIELD) != 1:
            p = _cleaned(p)
            text = _pub_text(p, group)
        return text, (p[6], *p[3])
    if p[0] == _END:
        text = _end_text(p)
        if text.count(CONTENT) != _END_CONTENTS or text.count(FIELD) != 1:
            p = _cleaned(p)
            text = _end_text(p)
        return text, (p[4], *p[3])
    text = _sub_text(p)
    if text.count(CONTENT) != _SUB_CONTENTS or text.count(FIELD) != 2:
        p = _cleaned(p)
        text = _sub_text(p)
    return text, (p[1], *p[2])


def _cleaned(p: _Pending) -> _Pending:
    """``p`` with CONTENT and FIELD taken out of its strings and its keys' (numbers stay as they are)."""
    return tuple(
        v.translate(_NO_SEPARATORS)
        if isinstance(v, str)
        else tuple(str(k).translate(_NO_SEPARATORS) for k in v)
        if isinstance(v, tuple | list)
        else v
        for v in p
    )


def pub(msg: Message, result: SendResult, *, group: str, started_ms: int, cost_ms: int) -> Record:
    """A ``Pub`` record of a message a broker stored (TraceDataEncoder.encoderFromContextBean)."""
    return Record(*_record(_sent(msg, result, started_ms, cost_ms), group))


def sub(msg: MessageExt, *, group: str, region: str, started_ms: int, cost_ms: int, ok: bool) -> Record:
    """The ``SubBefore`` and ``SubAfter`` records of one consumed message, under one request id."""
    return Record(*_record(_consumed(msg, group, started_ms, cost_ms, ok, region), group))


class Dispatcher:
    """Buffers what happened and writes its records to the trace topic in batches from a task of its
    own."""

    def __init__(self, producer: Any, *, topic: str = DEFAULT_TOPIC, group: str, owned: bool = False) -> None:
        """``group``: the producer group the Pub records name (the app's). ``owned``: ``producer`` is
        the trace's own (app.wiring.trace_producer), started before its first write and closed by
        ``close``; not the app's, whose fault table a broker refusing the trace topic must not touch."""
        self._producer = producer
        self.topic = topic
        self.group = group
        self._owned = owned  # its producer is closed by close(), once
        self._start_pending = owned  # the owned producer starts before the first write, once
        self._buffer: deque[_Pending] = deque(maxlen=MAX_BUFFERED)
        self._wake = asyncio.Event()
        self._writing = asyncio.Lock()  # one flush at a time: a flush returns once all before it is written
        self._task: asyncio.Task[None] | None = None
        self.written = self.dropped = self.failed = 0  # trace messages written, records dropped, failed

    def add(self, pending: _Pending) -> None:
        """Never waits: a full buffer drops its oldest record (and counts it)."""
        buffer = self._buffer
        if len(buffer) == MAX_BUFFERED:
            self.dropped += 1
        buffer.append(pending)
        if len(buffer) == 1:  # the first since the last flush arms the writer; the others ride along
            self._arm()

    def add_all(self, pending: list[_Pending]) -> None:
        """``add`` of each, in one go."""
        buffer = self._buffer
        was_empty = not buffer
        over = len(buffer) + len(pending) - MAX_BUFFERED
        if over > 0:
            self.dropped += over
        buffer.extend(pending)
        if was_empty and buffer:
            self._arm()

    def _arm(self) -> None:
        """One timer per flush: the writer's task wakes, waits FLUSH_S, writes what is buffered."""
        if self._task is None:
            self._task = asyncio.get_running_loop().create_task(self._run())
        self._wake.set()

    async def _run(self) -> None:
        while True:
            await self._wake.wait()
            self._wake.clear()
            await asyncio.sleep(FLUSH_S)  # gather what arrives meanwhile into the same trace messages
            try:
                await self.flush()
            except Exception:  # a record it could not build: those taken are lost, the writer goes on
                log.exception("message trace flush failed")
            if self._buffer:  # records that came while it wrote: the next timer takes them
                self._wake.set()

    async def flush(self) -> None:
        """Write what is buffered when it is called (a flush returns once all before it is written):
        trace messages of MAX_RECORDS records (or MAX_MESSAGE_BYTES), up to MAX_PER_WRITE records in one
        batch request. Not what comes while it writes: draining until empty sent a trace message per
        round trip under load (session 11: ~5 records each, every one a send of its own)."""
        async with self._writing:
            buffer = self._buffer
            if self._start_pending and buffer:  # once, when there is a first record
                self._start_pending = False
                await self._producer.start()
            left = len(buffer)
            while left > 0 and buffer:
                messages, taken = self._messages(buffer, min(left, MAX_PER_WRITE))
                left -= taken
                await self._write(messages)

    def _messages(self, buffer: deque[_Pending], most: int) -> tuple[list[Message], int]:
        """Up to ``most`` records from ``buffer``, built and cut into trace messages; and how many."""
        group, topic = self.group, self.topic
        messages: list[Message] = []
        taken = 0
        while buffer and taken < most:
            data: list[str] = []
            keys: dict[str, None] = {}  # each key once, in order: a record's message id, then its keys
            size = keys_size = 0
            room = min(MAX_RECORDS, most - taken)
            while buffer and len(data) < room and size < MAX_MESSAGE_BYTES and keys_size < KEYS_FULL:
                text, found = _record(buffer.popleft(), group)
                data.append(text)
                size += len(text)
                for k in found:  # a key the index cannot hold (a space) or has no room for is left out
                    if k and k not in keys and " " not in k:
                        n = len(k) if k.isascii() else len(k.encode())  # bytes, ASCII's without encoding
                        if keys_size + n < MAX_KEYS_BYTES:
                            keys[k] = None
                            keys_size += n + 1
            taken += len(data)
            messages.append(Message(topic, "".join(data).encode("utf-8"), keys=tuple(keys)))
        return messages, taken

    async def _write(self, messages: list[Message]) -> None:
        try:
            # validated: the trace topic is a system topic, which validation refuses for the app's sends
            outcomes = await self._producer.send_batch(messages, validated=True)
        except asyncio.CancelledError:  # close gave up on this write: its records are taken, not written
            self.failed += len(messages)
            raise
        except Exception as exc:  # whatever it is, a trace record is not worth more than a count
            self.failed += len(messages)
            log.debug("message trace not written: %s", exc)
            return
        for outcome in outcomes:
            if isinstance(outcome, SendResult):
                self.written += 1
            else:
                self.failed += 1
                log.debug("message trace not written: %s", outcome)

    async def close(self) -> None:
        """Write what is buffered, within CLOSE_S, then stop the writer's task. The flush first: it
        waits for the lock, so for the writer's write under way (cancelling the task cut that write off
        and lost the records it had taken), then writes the rest. What is still unwritten when the time
        is up is counted: a write cut off in trace messages failed, the records still buffered dropped
        (they never became a trace message)."""
        try:
            await asyncio.wait_for(self.flush(), CLOSE_S)
        except TimeoutError:
            pass
        except Exception:  # as the writer's: the records taken are lost, the stop goes on
            log.exception("message trace flush failed")
        if self._task is not None:
            self._task.cancel()
            try:
                await self._task
            except asyncio.CancelledError:
                pass
        if self._buffer:  # left by a flush that timed out (or records added while it wrote)
            self.dropped += len(self._buffer)
            self._buffer.clear()
        started = self._owned and not self._start_pending
        self._owned = self._start_pending = False  # not started after this: its instance closes next
        if started:
            try:  # its group leaves the heartbeat; the client instance under it is the process's
                await self._producer.close()
            except Exception as exc:  # a trace producer that cannot close must not stop the shutdown
                log.warning("message trace producer not closed cleanly: %s", exc)


DISPATCHER: Dispatcher | None = None  # set at start when ROCKSIDECAR_MSG_TRACE=true


def now_ms() -> int:
    return time_ns() // 1_000_000


def consumed(msg: MessageExt, group: str, started_ms: int, ok: bool) -> None:
    """The SubBefore/SubAfter records of a message a subscription delivered (or failed to)."""
    d = DISPATCHER
    if d is not None:
        d.add(_consumed(msg, group, started_ms, now_ms() - started_ms, ok))


def consumed_all(msgs: Sequence[MessageExt], group: str, started_ms: int, oks: Sequence[bool]) -> None:
    """The SubBefore/SubAfter records of a batch one POST delivered (bulk), each with its own outcome and
    the batch's time shared out, as ConsumeMessageTraceHookImpl divides a batch's cost by its size."""
    d = DISPATCHER
    if d is not None and msgs:
        ended = now_ms()  # SubAfter's timestamp: the batch's end, as Java's (its cost is the share)
        cost = (ended - started_ms) // len(msgs)
        d.add_all(
            [_consumed(m, group, started_ms, cost, ok, None, ended) for m, ok in zip(msgs, oks, strict=True)]
        )


class MsgTraceSender(WatchedSender):
    """A Sender that records a ``Pub`` for every message a broker stored (no waiting, no failing)."""

    def __init__(self, inner: Any, dispatcher: Dispatcher) -> None:
        super().__init__(inner)
        self._dispatcher = dispatcher

    async def send(
        self, msg: Message, *, sharding_key: str | None = None, validated: bool = False
    ) -> SendResult:
        """The one hot path here: the inner send itself, not through WatchedSender's hook (a lambda and a
        coroutine less per message), and now_ms() without its frame."""
        started = time_ns() // 1_000_000
        result: SendResult = await self._inner.send(msg, sharding_key=sharding_key, validated=validated)
        self._dispatcher.add(_sent(msg, result, started, time_ns() // 1_000_000 - started))
        return result

    async def _many(
        self, messages: Sequence[Message], call: Callable[[], Awaitable[BatchResults]]
    ) -> BatchResults:
        """A batch (the coalescer's, the API's, the replay's): its records buffered in one go."""
        started = now_ms()
        results = await call()
        cost = now_ms() - started
        self._dispatcher.add_all(
            [
                _sent(m, r, started, cost)
                for m, r in zip(messages, results, strict=True)
                if isinstance(r, SendResult)
            ]
        )
        return results


class TransactionTrace:
    """Java's trace hooks on a TransactionMQProducer (rmq.producer.transaction.TransactionHook): a Pub
    of each half a broker stored (Trans_Msg_Half, its group the transaction producer's), an
    EndTransaction of each decision and check answer sent (EndTransactionTraceHookImpl). Set only when
    the trace is on (app.transactions.parts)."""

    def __init__(self, dispatcher: Dispatcher) -> None:
        self._dispatcher = dispatcher

    def half_stored(self, group: str, msg: Message, result: SendResult, started_ms: int) -> None:
        self._dispatcher.add(_sent(msg, result, started_ms, now_ms() - started_ms, group))

    def ending(self, end: EndTransaction, topic: str, broker_addr: str, msg: MessageExt | None) -> None:
        """A decision names no tags nor keys: the sidecar's record of a transaction holds only where its
        half is (they are "null", as Java's for a message without them); a check's message has them."""
        tags: str | None = None
        keys: tuple[str, ...] = ()
        region = "DefaultRegion"
        if msg is not None:
            tags, keys, region = msg.tags, msg.keys, msg.properties.get("MSG_REGION") or region
        state = _STATE_NAMES.get(end.state, "UNKNOW")
        pending = (_END, topic, tags, keys, end.msg_id, broker_addr, end.transaction_id, state,
                   end.from_transaction_check, region, now_ms(), end.producer_group)  # fmt: skip
        self._dispatcher.add(pending)
