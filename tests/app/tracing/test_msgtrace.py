"""RocketMQ message trace: Pub and SubBefore/SubAfter records in TraceDataEncoder's format, written in
batches to the trace topic keyed by message id and keys; off by default; a trace topic that cannot be
written never fails a send, nor sets a broker aside for the app's sends; a foreign field cannot add
fields to a record."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any

import pytest

from rocksidecar.app.tracing import msgtrace
from rocksidecar.app.wiring import trace_group
from rocksidecar.devbroker.send import Reject, SendProcessor
from rocksidecar.rmq import Message
from rocksidecar.rmq.codes import ResponseCode
from rocksidecar.rmq.errors import RocketMQError
from rocksidecar.rmq.message import MessageExt, MessageQueue, decode_properties
from rocksidecar.rmq.result import SendResult, SendStatus
from tests.app.conftest import Stack, settings_for
from tests.rmq.consumer.factory import stored

OFFSET_ID = "7F00000100002A9F0000000000000ABC"  # 127.0.0.1:10911


def result(msg_id: str) -> SendResult:
    return SendResult(SendStatus.SEND_OK, msg_id, OFFSET_ID, MessageQueue("T", "broker-a", 1), 7)


def test_a_pub_record_is_trace_data_encoder_s() -> None:
    msg = Message("T", b"hello", tags="TagA", keys=("k1", "k2"), id="ID1")
    rec = msgtrace.pub(msg, result("ID1"), group="pg", started_ms=1000, cost_ms=3)
    assert rec.data.split("\x01") == [
        "Pub", "1000", "DefaultRegion", "pg", "T", "ID1", "TagA", "k1 k2", "127.0.0.1:10911", "5", "3", "0",
        OFFSET_ID, "true\x02",
    ]  # fmt: skip
    assert rec.keys == ("ID1", "k1", "k2")


def test_sub_records_share_a_request_id() -> None:
    msg = stored(5, b"x", reconsume_times=2)
    rec = msgtrace.sub(msg, group="cg", region="DefaultRegion", started_ms=2000, cost_ms=4, ok=False)
    before, after, tail = rec.data.split("\x02")
    b, a = before.split("\x01"), after.split("\x01")
    assert tail == "" and b[0] == "SubBefore" and a[0] == "SubAfter"
    assert b[1:4] == ["2000", "DefaultRegion", "cg"] and b[4] == a[1] and b[5] == a[2] == msg.msg_id
    assert b[6] == "2" and a[3:5] == ["4", "false"] and a[6:] == ["4", "2004", "cg"]


async def test_sends_are_written_to_the_trace_topic_in_batches(make_stack: Callable[..., Any]) -> None:
    async with make_stack(msg_trace=True) as stack:
        stack_: Stack = stack
        ids = []
        for i in range(3):
            r = await stack_.http.post(
                "/v1/messages", json={"topic": "MtSend", "body": str(i), "keys": [f"k{i}"]}
            )
            ids.append(r.json()["id"])
        assert stack_.service.msg_trace is not None
        await stack_.service.msg_trace.flush()
        traces = stack_.stored(msgtrace.DEFAULT_TOPIC)
        assert (traces and len(traces) < 3) or sum(1 for _ in traces) <= 3
        records = [r for m in traces for r in m.body.decode().split("\x02") if r]
        pubs = {r.split("\x01")[5]: r.split("\x01") for r in records if r.startswith("Pub")}
        assert set(pubs) == set(ids)
        keys = {k for m in traces for k in m.keys}
        assert set(ids) <= keys and {"k0", "k1", "k2"} <= keys
        scraped = (await stack_.http.get("/metrics")).text
        assert f"rocksidecar_msg_trace_messages_written_total {float(len(traces))}" in scraped
        assert "rocksidecar_msg_trace_records_dropped_total 0.0" in scraped


async def test_off_by_default(stack: Stack) -> None:
    await stack.http.post("/v1/messages", json={"topic": "MtOff", "body": "x"})
    assert stack.service.msg_trace is None and not stack.stored(msgtrace.DEFAULT_TOPIC)


async def test_a_trace_topic_that_fails_never_fails_a_send(make_stack: Callable[..., Any]) -> None:
    async with make_stack(msg_trace=True, msg_trace_topic="bad topic name") as stack:
        r = await stack.http.post("/v1/messages", json={"topic": "MtFail", "body": "x"})
        assert r.status_code == 200
        await stack.service.msg_trace.flush()
        assert stack.service.msg_trace.written == 0
        assert stack.service.msg_trace.failed + stack.service.msg_trace.dropped >= 1
        scraped = (await stack.http.get("/metrics")).text
        assert "rocksidecar_msg_trace_messages_failed_total 1.0" in scraped


class _Held:
    """A trace producer whose batch sends wait until ``go`` is set; it keeps every batch it was given."""

    def __init__(self) -> None:
        self.batches: list[list[Message]] = []
        self.go = asyncio.Event()
        self.asked = asyncio.Event()  # set by the first send_batch

    async def send_batch(self, messages: list[Message], *args: Any, **kwargs: Any) -> list[SendResult]:
        self.batches.append(list(messages))
        self.asked.set()
        await self.go.wait()
        return [result(f"T{i}") for i in range(len(messages))]


def _sent(n: int, start: int = 0) -> list[tuple[Message, SendResult]]:
    return [(Message("T", b"x" * 300, keys=(f"k{i}",)), result(f"ID{i}")) for i in range(start, start + n)]


def _records(batches: list[list[Message]]) -> list[str]:
    return [r for batch in batches for m in batch for r in m.body.decode().split("\x02") if r]


async def test_records_go_out_in_trace_messages_of_100_in_one_batch_request() -> None:
    producer = _Held()
    producer.go.set()
    d = msgtrace.Dispatcher(producer, group="pg")
    for msg, res in _sent(250):
        d.add(msgtrace._sent(msg, res, 1000, 2))
    await d.flush()
    assert len(producer.batches) == 1, "one request per flush"
    assert [len(m.body.decode().split("\x02")) - 1 for m in producer.batches[0]] == [100, 100, 50]
    first = producer.batches[0][0]
    assert first.keys[:3] == ("ID0", "k0", "ID1") and len(first.keys) == 200
    # uncompressed TraceDataEncoder text, every record there once
    assert [r.split("\x01")[5] for r in _records(producer.batches)] == [f"ID{i}" for i in range(250)]
    assert d.written == 3 and d.failed == d.dropped == 0


async def test_a_flush_writes_what_was_buffered_when_it_began() -> None:
    """Records that arrive while a flush writes wait for the next timer: under load, draining until empty
    sent one small trace message per round trip."""
    producer = _Held()
    d = msgtrace.Dispatcher(producer, group="pg")
    for msg, res in _sent(3):
        d.add(msgtrace._sent(msg, res, 1000, 2))
    flushing = asyncio.create_task(d.flush())
    await producer.asked.wait()
    for msg, res in _sent(2, start=3):
        d.add(msgtrace._sent(msg, res, 1000, 2))
    producer.go.set()
    await flushing
    assert len(producer.batches) == 1 and len(_records(producer.batches)) == 3
    await d.flush()
    assert [r.split("\x01")[5] for r in _records(producer.batches[1:])] == ["ID3", "ID4"]
    await d.close()


async def test_the_writer_goes_on_after_a_flush_that_failed(monkeypatch: pytest.MonkeyPatch) -> None:
    """A record the writer cannot build (a bug) is logged; the writer's task does not end with it."""
    monkeypatch.setattr(msgtrace, "FLUSH_S", 0)
    failed = asyncio.Event()
    build = msgtrace._pub_text

    def broken(p: Any, group: str) -> str:
        if p[6] == "ID0":
            failed.set()
            raise RuntimeError("a record that cannot be built")
        return build(p, group)

    monkeypatch.setattr(msgtrace, "_pub_text", broken)
    producer = _Held()
    producer.go.set()
    d = msgtrace.Dispatcher(producer, group="pg")
    (first, second) = _sent(2)
    d.add(msgtrace._sent(*first, 1000, 2))
    await failed.wait()
    d.add(msgtrace._sent(*second, 1000, 2))
    async with asyncio.timeout(5):  # before: the task had ended, nothing was written again
        await producer.asked.wait()
    assert [r.split("\x01")[5] for r in _records(producer.batches)] == ["ID1"]
    await d.close()


async def test_a_full_buffer_drops_the_oldest_and_counts_them(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(msgtrace, "MAX_BUFFERED", 4)
    producer = _Held()
    producer.go.set()
    d = msgtrace.Dispatcher(producer, group="pg")
    for msg, res in _sent(6):
        d.add(msgtrace._sent(msg, res, 1000, 2))  # never waits: the send it records goes on
    assert d.dropped == 2
    await d.flush()
    assert [r.split("\x01")[5] for r in _records(producer.batches)] == ["ID2", "ID3", "ID4", "ID5"]
    await d.close()


def test_a_buffered_record_holds_no_body() -> None:
    ((msg, res),) = _sent(1)
    pending = msgtrace._sent(msg, res, 1000, 2)
    assert not any(isinstance(v, bytes | Message | SendResult) for v in pending)


async def test_a_trace_message_s_keys_stay_bounded() -> None:
    producer = _Held()
    producer.go.set()
    d = msgtrace.Dispatcher(producer, group="pg")
    long_keys = tuple(f"{i:04d}" + "k" * 400 for i in range(60))
    for i in range(3):
        d.add(msgtrace._sent(Message("T", b"x", keys=long_keys), result(f"ID{i}"), 1000, 2))
    await d.flush()
    messages = producer.batches[0]
    assert all(len(" ".join(m.keys)) <= msgtrace.MAX_KEYS_CHARS for m in messages)
    assert [m.keys[0] for m in messages] == ["ID0", "ID1", "ID2"]  # each record's id found its message
    assert len(_records(producer.batches)) == 3


async def test_a_batch_s_stored_messages_are_recorded_in_one_go() -> None:
    """Under the coalescer the API's sends reach the trace wrapper as batches: a record for each message
    stored, none for one refused."""

    class Inner:
        async def send_batch(self, messages: Any, keys: Any = None, *, validated: bool = False) -> list[Any]:
            return [result("B0"), RocketMQError("refused"), result("B2")]

    producer = _Held()
    producer.go.set()
    d = msgtrace.Dispatcher(producer, group="pg")
    sender = msgtrace.MsgTraceSender(Inner(), d)
    got = await sender.send_batch([Message("T", b"x", keys=(f"k{i}",)) for i in range(3)])
    assert isinstance(got[1], RocketMQError)
    await d.flush()
    pubs = [r.split("\x01") for r in _records(producer.batches)]
    assert [(p[5], p[7]) for p in pubs] == [("B0", "k0"), ("B2", "k2")]
    await d.close()


async def test_a_refused_trace_topic_isolates_no_broker_for_the_app_s_sends(
    make_stack: Callable[..., Any], monkeypatch: pytest.MonkeyPatch
) -> None:
    """Brokers that refuse the trace topic (NO_PERMISSION: an ACL, a topic not writable) are set aside by
    the trace's own producer only: before, the trace wrote through the app's, and its fault table (what
    /readyz reads) had every broker isolated after one flush."""
    target = SendProcessor._target_queue

    def refusing(self: SendProcessor, h: Any) -> int:
        if h.topic == msgtrace.DEFAULT_TOPIC:
            raise Reject(ResponseCode.NO_PERMISSION, "no permission to send to RMQ_SYS_TRACE_TOPIC")
        return target(self, h)

    monkeypatch.setattr(SendProcessor, "_target_queue", refusing)
    async with make_stack(msg_trace=True) as stack:
        service = stack.service
        r = await stack.http.post("/v1/messages", json={"topic": "MtIso", "body": "x"})
        assert r.status_code == 200
        await service.msg_trace.flush()
        assert service.msg_trace.failed == 1 and service.msg_trace.written == 0
        assert {row.state for row in service.producer.fault_table()} == {"available"}
        ready = await stack.http.get("/readyz")
        assert ready.status_code == 200, ready.text[:300]  # before: 503, "every broker is isolated"
        again = await stack.http.post("/v1/messages", json={"topic": "MtIso", "body": "y"})
        assert again.status_code == 200
        trace_producer = service.msg_trace._producer
        assert trace_producer is not service.producer and trace_producer.instance is service.client
        assert {row.state for row in trace_producer.fault_table()} == {"isolated"}  # its own table
        # its own group, announced beside the app's; the records still name the app's
        assert service.client.producer_groups == sorted(
            ["rocksidecar", "_INNER_TRACE_PRODUCER-RMQ_SYS_TRACE_TOPIC"]
        )
        assert service.msg_trace.group == "rocksidecar"
    assert "_INNER_TRACE_PRODUCER-RMQ_SYS_TRACE_TOPIC" not in service.client.producer_groups  # closed


def test_the_trace_group_is_a_group_and_never_one_of_the_sidecar_s(tmp_path: Any) -> None:
    assert trace_group(settings_for(tmp_path)) == "_INNER_TRACE_PRODUCER-RMQ_SYS_TRACE_TOPIC"
    assert trace_group(settings_for(tmp_path, msg_trace_topic="bad topic\x01name")) == (
        "_INNER_TRACE_PRODUCER-badtopicname"
    )
    taken = "_INNER_TRACE_PRODUCER-MtT"
    for own in ({"producer_group": taken}, {"transactions_group": taken}):
        group = trace_group(settings_for(tmp_path, msg_trace_topic="MtT", **own))
        assert group == taken + "-trace"


def _consumed_with(keys: str, uniq: str, region: str = "DefaultRegion") -> MessageExt:
    """A consumed message whose producer wrote ``keys``, ``uniq`` and ``region`` raw: what
    decode_properties makes of them (a value keeps every CONTENT after its first)."""
    props = decode_properties(f"KEYS\x01{keys}\x02UNIQ_KEY\x01{uniq}\x02MSG_REGION\x01{region}")
    return MessageExt(topic="T", body=b"x", queue_id=0, queue_offset=1, commit_log_offset=1, sys_flag=0,
                      flag=0, born_timestamp_ms=0, born_host="h:1", store_timestamp_ms=0, store_host="h:2",
                      reconsume_times=0, prepared_transaction_offset=0, body_crc=0, store_size=0,
                      properties=props, offset_msg_id="O1")  # fmt: skip


async def test_a_consumed_message_s_separators_stay_out_of_its_records() -> None:
    """A producer's UNIQ_KEY, keys or region with CONTENT in them added fields to SubBefore/SubAfter:
    Java's decoderFromTraceDataString then fails on the whole trace message (MAX_RECORDS records)."""
    msg = _consumed_with("k1\x01forged k2", uniq="U1\x01x", region="r\x01\x01")
    assert "\x01" in msg.keys[0] and "\x01" in msg.msg_id  # what a producer can store
    producer = _Held()
    producer.go.set()
    d = msgtrace.Dispatcher(producer, group="cg")
    d.add(msgtrace._consumed(msg, "cg", 1000, 2, True))
    d.add(msgtrace._sent(Message("T", b"x", keys=("k3",)), result("ID3"), 1000, 2))  # a clean one after
    await d.flush()
    ((trace,),) = producer.batches
    before, after, pub = (r.split("\x01") for r in _records(producer.batches))
    assert [len(before), len(after), len(pub)] == [8, 9, 14]  # TraceDataEncoder's fields
    assert before[2] == "r" and before[5] == after[2] == "U1x" and before[7] == after[5] == "k1forged k2"
    assert pub[5] == "ID3"
    assert trace.keys == ("U1x", "k1forged", "k2", "ID3", "k3")  # the trace message's KEYS: none either


def test_a_broker_s_answer_with_separators_stays_out_of_a_pub_record() -> None:
    answer = SendResult(SendStatus.SEND_OK, "ID1", "7F\x02" + OFFSET_ID[3:], MessageQueue("T", "b", 1), 7,
                        region_id="r\x01x")  # fmt: skip
    rec = msgtrace.pub(Message("T", b"x", keys=("k1",)), answer, group="pg", started_ms=1, cost_ms=2)
    fields = rec.data.split("\x01")
    assert len(fields) == 14 and rec.data.count("\x02") == 1 and rec.data.endswith("\x02")
    assert fields[2] == "rx" and fields[12] == "7F" + OFFSET_ID[3:]


async def test_an_owned_trace_producer_starts_before_its_first_write_and_closes_once() -> None:
    class Owned(_Held):
        def __init__(self) -> None:
            super().__init__()
            self.calls: list[str] = []

        async def start(self) -> None:
            self.calls.append("start")

        async def close(self) -> None:
            self.calls.append("close")

        async def send_batch(self, messages: list[Message], *args: Any, **kwargs: Any) -> list[SendResult]:
            self.calls.append("send")
            return await super().send_batch(messages, *args, **kwargs)

    producer = Owned()
    producer.go.set()
    d = msgtrace.Dispatcher(producer, group="pg", owned=True)
    await d.flush()
    assert producer.calls == []  # nothing to write: not started (its group is not announced for nothing)
    for msg, res in _sent(2):
        d.add(msgtrace._sent(msg, res, 1000, 2))
        await d.flush()
    await d.close()
    await d.close()
    assert producer.calls == ["start", "send", "send", "close"]
    idle = Owned()
    await msgtrace.Dispatcher(idle, group="pg", owned=True).close()
    assert idle.calls == []  # never started: nothing to close
