"""The sidecar's RocketMQ message trace against Java 4.9.4's, read as Java reads it (moved from the session
31 review's test_zz_review_msgtrace_parity.py, its findings fixed).

Reference: apache/rocketmq at tag rocketmq-all-4.9.4, client/.../trace/TraceDataEncoder
(decoderFromTraceDataString, encoderFromContextBean), TraceView.decodeFromTraceTransData (what
tools/.../QueryMsgTraceByIdSubCommand prints), the Send/Consume/EndTransaction trace hooks. The decoder is
ported below as it behaves in Java: ``String.split`` drops trailing empty strings, an index past the end is
an ArrayIndexOutOfBoundsException (IndexError here), a bad number a NumberFormatException (ValueError).
queryMsgTraceById catches neither per trace message: the whole command fails.
"""

from __future__ import annotations

import ipaddress
import struct
from collections.abc import Callable
from typing import Any

import pytest

from rocksidecar.app.tracing import msgtrace
from rocksidecar.rmq import Message
from rocksidecar.rmq.broker import EndTransaction
from rocksidecar.rmq.message import MessageExt, MessageQueue
from rocksidecar.rmq.producer.transaction import TransactionState
from rocksidecar.rmq.result import SendResult, SendStatus

OFFSET_ID = "7F00000100002A9F0000000000000ABC"  # 127.0.0.1:10911
CONTENT, FIELD = "\x01", "\x02"
PUB_TYPES = ("Normal_Msg", "Trans_Msg_Half", "Trans_msg_Commit", "Delay_Msg")  # MessageType, 4.9.4


# ---- Java 4.9.4 reference (ported) --------------------------------------------------------------------


def java_split(text: str, sep: str) -> list[str]:
    """java.lang.String.split(sep) with limit 0: trailing empty strings are removed."""
    parts = text.split(sep)
    while len(parts) > 1 and parts[-1] == "":
        parts.pop()
    if parts == [""] and text != "":
        return []
    return parts


def java_bool(s: str) -> bool:
    return s.lower() == "true"  # Boolean.parseBoolean


def java_decode(trace_data: str) -> list[dict[str, Any]]:
    """TraceDataEncoder.decoderFromTraceDataString, 4.9.4, field for field."""
    out: list[dict[str, Any]] = []
    if not trace_data:
        return out
    for context in java_split(trace_data, FIELD):
        line = java_split(context, CONTENT)
        kind = line[0]
        if kind == "Pub":
            ctx: dict[str, Any] = {
                "type": "Pub", "timestamp": int(line[1]), "region": line[2], "group": line[3],
                "topic": line[4], "msg_id": line[5], "tags": line[6], "keys": line[7],
                "store_host": line[8], "body_length": int(line[9]), "cost": int(line[10]),
                "msg_type": PUB_TYPES[int(line[11])], "success": True,
            }  # fmt: skip
            if len(line) == 13:
                ctx["success"] = java_bool(line[12])
            elif len(line) == 14:
                ctx["offset_msg_id"] = line[12]
                ctx["success"] = java_bool(line[13])
            if len(line) >= 15:
                ctx["offset_msg_id"] = line[12]
                ctx["success"] = java_bool(line[13])
            out.append(ctx)
        elif kind == "SubBefore":
            before = {
                "type": "SubBefore", "timestamp": int(line[1]), "region": line[2], "group": line[3],
                "request_id": line[4], "msg_id": line[5], "retry_times": int(line[6]),
                "keys": line[7], "success": True, "cost": 0,
            }  # fmt: skip
            out.append(before)
        elif kind == "SubAfter":
            ctx = {
                "type": "SubAfter", "request_id": line[1], "msg_id": line[2], "keys": line[5],
                "cost": int(line[3]), "success": java_bool(line[4]), "timestamp": None, "group": "",
            }  # fmt: skip
            if len(line) >= 7:
                ctx["context_code"] = int(line[6])
            if len(line) >= 9:
                ctx["timestamp"] = int(line[7])
                ctx["group"] = line[8]
            out.append(ctx)
        elif kind == "EndTransaction":
            end = {
                "type": "EndTransaction", "timestamp": int(line[1]), "region": line[2],
                "group": line[3], "topic": line[4], "msg_id": line[5], "tags": line[6],
                "keys": line[7], "store_host": line[8], "msg_type": PUB_TYPES[int(line[9])],
                "transaction_id": line[10], "transaction_state": line[11],
                "from_check": java_bool(line[12]),
                "success": True,  # TraceContext's isSuccess = true: decoderFromTraceDataString sets none
            }  # fmt: skip
            out.append(end)
    return out


def trace_views(key: str, body: bytes) -> list[dict[str, Any]]:
    """TraceView.decodeFromTraceTransData: the records of one trace message about ``key``."""
    return [
        {**c, "status": "success" if c["success"] else "failed"}
        for c in java_decode(body.decode("utf-8"))
        if c["msg_id"] == key
    ]


def java_pub(*, ts: int, region: str, group: str, topic: str, msg_id: str, tags: Any, keys: Any,
             store_host: str, body_len: int, cost: int, msg_type: int, offset_id: str,
             success: bool) -> str:  # fmt: skip
    """encoderFromContextBean, case Pub (a Java null appends "null", a boolean "true"/"false")."""
    fields = [
        "Pub", ts, region, group, topic, msg_id, tags, keys, store_host, body_len, cost, msg_type,
        offset_id, str(success).lower(),
    ]  # fmt: skip
    return CONTENT.join("null" if f is None else str(f) for f in fields) + FIELD


# ---- helpers -----------------------------------------------------------------------------------------


class _Producer:
    """A trace producer that keeps every batch it is given and stores them all."""

    def __init__(self) -> None:
        self.batches: list[list[Message]] = []

    async def send_batch(self, messages: list[Message], *args: Any, **kwargs: Any) -> list[SendResult]:
        self.batches.append(list(messages))
        return [result(f"T{i}") for i in range(len(messages))]

    def bodies(self) -> list[bytes]:
        return [m.body for batch in self.batches for m in batch]


def result(msg_id: str, status: SendStatus = SendStatus.SEND_OK, offset_id: str = OFFSET_ID) -> SendResult:
    return SendResult(status, msg_id, offset_id, MessageQueue("T", "broker-a", 1), 7)


def consumed(offset: int, *, keys: str | None = None) -> MessageExt:
    props = {"UNIQ_KEY": f"U{offset:08d}"}
    if keys is not None:
        props["KEYS"] = keys
    return MessageExt(topic="T", body=b"x", queue_id=0, queue_offset=offset, commit_log_offset=offset,
                      sys_flag=0, flag=0, born_timestamp_ms=0, born_host="127.0.0.1:1",
                      store_timestamp_ms=0, store_host="127.0.0.1:2", reconsume_times=0,
                      prepared_transaction_offset=0, body_crc=0, store_size=0, properties=props,
                      offset_msg_id=f"O{offset}")  # fmt: skip


# ---- findings ----------------------------------------------------------------------------------------


async def test_a_delivered_message_without_keys_leaves_a_trace_message_java_can_read() -> None:
    """Most messages have no KEYS. Their SubBefore ends with an empty keys field ("...\\x01<reconsume>\\x01"),
    which Java's split drops: line[7] is then past the end and decoderFromTraceDataString throws for the
    whole trace message, so queryMsgTraceById fails for every message whose records share it (here the
    Pub of another one too). Java writes "null" there (msg.getKeys() is null)."""
    producer = _Producer()
    d = msgtrace.Dispatcher(producer, group="pg")
    d.add(msgtrace._sent(Message("T", b"hello", keys=("k1",)), result("P1"), 1000, 2))
    msg = consumed(5)  # no KEYS property
    d.add(msgtrace._consumed(msg, "cg", 2000, 4, True))
    await d.flush()
    (body,) = producer.bodies()
    try:
        pub_views = trace_views("P1", body)
        sub_views = trace_views(msg.msg_id, body)
    except IndexError as exc:
        pytest.fail(f"Java's decoderFromTraceDataString throws on this trace message: {exc!r}; {body!r}")
    assert [v["type"] for v in pub_views] == ["Pub"]
    assert [v["type"] for v in sub_views] == ["SubBefore", "SubAfter"]
    assert sub_views[1]["status"] == "success" and sub_views[1]["group"] == "cg"


def test_a_pub_of_a_degraded_store_is_success_false_as_java_s() -> None:
    """SendMessageTraceHookImpl: success = (status == SEND_OK); FLUSH_DISK_TIMEOUT, FLUSH_SLAVE_TIMEOUT,
    SLAVE_NOT_AVAILABLE write "false" and queryMsgTraceById / the Dashboard show "failed". The producer
    hands such a result back as the send's outcome (Producer._without_send_ok)."""
    msg = Message("T", b"hello", tags="TagA", keys=("k1",))
    rec = msgtrace.pub(
        msg, result("ID1", SendStatus.FLUSH_DISK_TIMEOUT), group="pg", started_ms=1000, cost_ms=3
    )
    java = java_pub(ts=1000, region="DefaultRegion", group="pg", topic="T", msg_id="ID1", tags="TagA",
                    keys="k1", store_host="127.0.0.1:10911", body_len=5, cost=3, msg_type=0,
                    offset_id=OFFSET_ID, success=False)  # fmt: skip
    assert rec.data == java
    (view,) = trace_views("ID1", rec.data.encode())
    assert view["status"] == "failed"


async def test_a_degraded_send_through_the_trace_wrapper_is_recorded_as_failed() -> None:
    """The same, on the path a send takes (MsgTraceSender)."""

    class Inner:
        async def send(self, msg: Message, **kwargs: Any) -> SendResult:
            return result("ID9", SendStatus.SLAVE_NOT_AVAILABLE)

    producer = _Producer()
    d = msgtrace.Dispatcher(producer, group="pg")
    await msgtrace.MsgTraceSender(Inner(), d).send(Message("T", b"x", keys=("k",)))
    await d.flush()
    (body,) = producer.bodies()
    (view,) = trace_views("ID9", body)
    assert view["status"] == "failed", "Java: sendResult status is not SEND_OK"


def test_an_ipv6_broker_s_store_host_is_its_address() -> None:
    """An offset message id of an IPv6 broker is 56 hex digits (16-byte address, port, offset); the
    project decodes it (rmq/message_codec._host_text, producer/transaction._OFFSET_MSG_ID). The Pub's
    storeHost read its first 8 digits as an IPv4 address and the next 8 as the port. Java writes the
    broker address it sent to; the Dashboard shows it as the store host."""
    ip = ipaddress.ip_address("2001:db8::1")
    offset_id = (ip.packed + struct.pack(">I", 10911) + struct.pack(">q", 0xABC)).hex().upper()
    assert len(offset_id) == 56
    rec = msgtrace.pub(
        Message("T", b"x"), result("ID1", offset_id=offset_id), group="pg", started_ms=1, cost_ms=2
    )
    (view,) = trace_views("ID1", rec.data.encode())
    host = view["store_host"]
    assert "2001:db8::1" in host and host.endswith(":10911"), host


async def test_a_bulk_delivery_s_sub_after_time_is_when_it_ended(monkeypatch: pytest.MonkeyPatch) -> None:
    """ConsumeMessageTraceHookImpl builds SubAfter after the batch is consumed: its timestamp (what
    queryMsgTraceById prints as #ConsumerTime) is the end, its costTime the batch's time divided by its
    size. consumed_all writes started + cost/N: for a batch of 4 taking 4 s, 3 s early."""
    producer = _Producer()
    d = msgtrace.Dispatcher(producer, group="pg")
    monkeypatch.setattr(msgtrace, "DISPATCHER", d)
    monkeypatch.setattr(msgtrace, "now_ms", lambda: 1_700_000_004_000)
    msgs = [consumed(i, keys=f"k{i}") for i in range(4)]
    msgtrace.consumed_all(msgs, "cg", 1_700_000_000_000, [True] * 4)
    await d.flush()
    (body,) = producer.bodies()
    after = [c for c in java_decode(body.decode()) if c["type"] == "SubAfter"]
    assert [c["cost"] for c in after] == [1000] * 4  # as Java: the batch's time / its size
    assert [c["timestamp"] for c in after] == [1_700_000_004_000] * 4


async def _tx_trace_records(make_stack: Callable[..., Any]) -> tuple[str, list[dict[str, Any]]]:
    async with make_stack(msg_trace=True) as stack:
        plain = await stack.http.post("/v1/messages", json={"topic": "MtTx", "body": "control"})
        assert plain.status_code == 200, plain.text
        begun = await stack.http.post(
            "/v1/transactions", json={"topic": "MtTx", "body": "hi", "keys": ["order-1"]}
        )
        assert begun.status_code == 201, begun.text
        tx_id = begun.json()["id"]
        done = await stack.http.post(f"/v1/transactions/{tx_id}:commit")
        assert done.status_code == 200 and done.json()["state"] == "COMMITTED", done.text
        await stack.service.msg_trace.flush()
        traces = stack.stored(msgtrace.DEFAULT_TOPIC)
        control = [v for m in traces for v in trace_views(plain.json()["id"], m.body)]
        assert [v["type"] for v in control] == ["Pub"]  # the trace is on and written in this stack
        records = [v for m in traces for v in trace_views(tx_id, m.body)]
        return tx_id, records


async def test_a_transactional_send_leaves_java_s_pub_record(make_stack: Callable[..., Any]) -> None:
    """Java's trace hooks sit on the TransactionMQProducer too: its half send leaves a Pub (msgType
    Trans_Msg_Half) found by the message id. The sidecar's transactions send through the bare producer
    (Transactions.build), so queryMsgTraceById of a committed transactional message shows no producer."""
    _, records = await _tx_trace_records(make_stack)
    pubs = [r for r in records if r["type"] == "Pub"]
    assert [(p["msg_type"], p["status"]) for p in pubs] == [("Trans_Msg_Half", "success")], records


async def test_a_commit_leaves_java_s_end_transaction_record(make_stack: Callable[..., Any]) -> None:
    """EndTransactionTraceHookImpl: END_TRANSACTION leaves an EndTransaction record (msgType
    Trans_msg_Commit, the state COMMIT_MESSAGE, fromTransactionCheck false) keyed by the message id; the
    Dashboard's trace of a transactional message shows it. The sidecar writes none."""
    _, records = await _tx_trace_records(make_stack)
    ends = [r for r in records if r["type"] == "EndTransaction"]
    assert [(e["msg_type"], e["transaction_state"], e["from_check"]) for e in ends] == [
        ("Trans_msg_Commit", "COMMIT_MESSAGE", False)
    ], records


async def test_no_tags_nor_keys_are_null_as_java_s_and_stay_out_of_the_trace_keys() -> None:
    """Every record type writes Java's "null" for a message without tags or keys; the trace message is
    found by the message ids only (Java adds no key for a null one)."""
    rec = msgtrace.pub(Message("T", b"x"), result("ID1"), group="pg", started_ms=1, cost_ms=2)
    assert rec.data == java_pub(ts=1, region="DefaultRegion", group="pg", topic="T", msg_id="ID1", tags=None,
                                keys=None, store_host="127.0.0.1:10911", body_len=1, cost=2, msg_type=0,
                                offset_id=OFFSET_ID, success=True)  # fmt: skip
    assert rec.keys == ("ID1",)
    producer = _Producer()
    d = msgtrace.Dispatcher(producer, group="pg")
    d.add(msgtrace._sent(Message("T", b"x"), result("P1"), 1000, 2))
    msg = consumed(5)
    d.add(msgtrace._consumed(msg, "cg", 2000, 4, True))
    await d.flush()
    ((trace,),) = producer.batches
    assert trace.keys == ("P1", msg.msg_id)
    before, after = trace_views(msg.msg_id, trace.body)
    assert before["keys"] == after["keys"] == "null"


async def test_a_transactional_half_of_a_degraded_store_is_a_failed_half_pub_of_its_group() -> None:
    """SendMessageTraceHookImpl on a TransactionMQProducer: the half's Pub names its producer group and
    Trans_Msg_Half, and is failed when the store was degraded."""
    producer = _Producer()
    d = msgtrace.Dispatcher(producer, group="pg")
    msg = Message("T", b"hello", tags="TagA", keys=("k1",))
    msgtrace.TransactionTrace(d).half_stored("txg", msg, result("H1", SendStatus.FLUSH_DISK_TIMEOUT), 1)
    (pending,) = d._buffer
    text, keys = msgtrace._record(pending, d.group)
    (view,) = trace_views("H1", text.encode())
    assert (view["group"], view["msg_type"], view["status"], view["keys"]) == (
        "txg",
        "Trans_Msg_Half",
        "failed",
        "k1",
    )
    assert keys == ("H1", "k1")
    await d.close()


async def test_a_check_answer_is_an_end_transaction_from_the_check() -> None:
    """EndTransactionTraceHookImpl, fromTransactionCheck true: the answer to a broker's check, with the
    checked message's tags, keys and region, the broker's address as the store host."""
    producer = _Producer()
    d = msgtrace.Dispatcher(producer, group="pg")
    msg = consumed(7, keys="order-7 other")
    end = EndTransaction("txg", 3, 4, TransactionState.ROLLBACK.value, msg.msg_id, "TX7", True)
    msgtrace.TransactionTrace(d).ending(end, "T", "10.0.0.1:10911", msg)
    (pending,) = d._buffer
    text, keys = msgtrace._record(pending, d.group)
    assert text.count(CONTENT) == 12  # encoderFromContextBean's 13 fields
    (view,) = trace_views(msg.msg_id, text.encode())
    assert (view["type"], view["group"], view["topic"], view["tags"], view["keys"], view["store_host"]) == (
        "EndTransaction",
        "txg",
        "T",
        "null",
        "order-7 other",
        "10.0.0.1:10911",
    )
    assert (view["msg_type"], view["transaction_id"], view["transaction_state"], view["from_check"]) == (
        "Trans_msg_Commit",
        "TX7",
        "ROLLBACK_MESSAGE",
        True,
    )
    assert keys == (msg.msg_id, "order-7", "other")
    await d.close()


def test_the_reference_decoder_reads_java_s_own_encoding() -> None:
    """The port is sound: Java's own Pub (a null tag and keys, as a message without them) decodes, and
    an empty trailing field is dropped as Java's split drops it."""
    java = java_pub(ts=1, region="DefaultRegion", group="pg", topic="T", msg_id="M", tags=None, keys=None,
                    store_host="127.0.0.1:10911", body_len=1, cost=0, msg_type=0, offset_id=OFFSET_ID,
                    success=True)  # fmt: skip
    (view,) = trace_views("M", java.encode())
    assert view["tags"] == "null" and view["status"] == "success"
    assert java_split("a\x01b\x01\x01", "\x01") == ["a", "b"]
    with pytest.raises(IndexError):
        java_decode("SubBefore\x011\x01r\x01g\x01req\x01M\x010\x01\x02")
