"""OpenTelemetry spans of the send path, read from the SDK's in-memory exporter: the span tree of a
send, of a spooled-then-replayed send, of a delayed send; the links back to the accepting request; and
nothing at all while tracing is off."""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable
from typing import Any

import pytest
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.sdk.trace.sampling import ALWAYS_ON, ParentBasedTraceIdRatio, TraceIdRatioBased
from opentelemetry.trace import SpanKind

from rocksidecar.app.http_client import Answer
from rocksidecar.app.tracing import spans
from rocksidecar.app.tracing.context import TRACEPARENT_PROPERTY
from rocksidecar.rmq import Message, SendResult
from rocksidecar.rmq.consumer.config import ConsumeStatus
from rocksidecar.rmq.message import MessageQueue
from rocksidecar.rmq.result import SendStatus
from tests.app.conftest import Stack
from tests.app.subscriptions.test_push import MQ, Recorded, message
from tests.app.tracing.test_lite import FixedIds

TRACE_ID = "0af7651916cd43dd8448eb211c80319c"
TP = f"00-{TRACE_ID}-b7ad6b7169203331-01"
RATIO = TraceIdRatioBased(0.5)


@pytest.fixture
async def traced(exporter: InMemorySpanExporter, make_stack: Callable[..., Any]) -> AsyncIterator[Stack]:
    async with make_stack() as s:  # built while spans are on: the send path gets its wrappers
        yield s


def by_name(exporter: InMemorySpanExporter) -> dict[str, ReadableSpan]:
    return {s.name: s for s in exporter.get_finished_spans()}


def process_then_deliver(
    exporter: InMemorySpanExporter, trace_id: str, parent_span: str
) -> tuple[ReadableSpan, ReadableSpan]:
    """The process (CONSUMER) span of a delivery, child of the sender's ``parent_span`` in its trace,
    and its deliver (CLIENT) child."""
    got = by_name(exporter)
    process, deliver = got["process T"], got["deliver T"]
    assert process.kind is SpanKind.CONSUMER and deliver.kind is SpanKind.CLIENT
    assert hex_trace(process) == trace_id and process.parent is not None
    assert f"{process.parent.span_id:016x}" == parent_span
    assert deliver.parent is not None and process.context is not None
    assert deliver.parent.span_id == process.context.span_id
    return process, deliver


def hex_trace(span: ReadableSpan) -> str:
    assert span.context is not None
    return f"{span.context.trace_id:032x}"


async def test_a_send_is_receive_then_send_in_the_request_s_trace(
    traced: Stack, exporter: InMemorySpanExporter
) -> None:
    r = await traced.http.post(
        "/v1/messages", json={"topic": "SpSend", "body": "x"}, headers={"traceparent": TP}
    )
    assert r.status_code == 200
    got = by_name(exporter)
    receive, send = got["receive SpSend"], got["send SpSend"]
    assert receive.kind is SpanKind.SERVER and send.kind is SpanKind.PRODUCER
    assert hex_trace(receive) == TRACE_ID and f"{receive.parent.span_id:016x}" == "b7ad6b7169203331"  # type: ignore[union-attr]
    assert send.parent is not None and receive.context is not None
    assert send.parent.span_id == receive.context.span_id
    assert send.attributes is not None and send.attributes["messaging.system"] == "rocketmq"
    assert send.attributes["messaging.destination.name"] == "SpSend"
    assert send.attributes["messaging.message.id"] == r.json()["id"]
    # the stored message points at the receive span: the consumer's trace continues from it
    (msg,) = traced.stored("SpSend")
    assert msg.properties[TRACEPARENT_PROPERTY] == f"00-{TRACE_ID}-{receive.context.span_id:016x}-01"


async def test_a_spooled_then_replayed_send_links_to_the_request(
    traced: Stack, exporter: InMemorySpanExporter
) -> None:
    await traced.http.post("/v1/messages", json={"topic": "SpSpool", "body": "warm"})
    await traced.stop_brokers()
    exporter.clear()
    r = await traced.http.post(
        "/v1/messages", json={"topic": "SpSpool", "body": "x"}, headers={"traceparent": TP}
    )
    assert r.json()["status"] == "SPOOLED"
    accepted = by_name(exporter)
    receive = accepted["receive SpSpool"]
    assert receive.context is not None
    failed, spool = accepted["send SpSpool"], accepted["spool SpSpool"]
    for child in (failed, spool):
        assert child.parent is not None and child.parent.span_id == receive.context.span_id
    assert not failed.status.is_ok and failed.attributes and "error.type" in failed.attributes
    exporter.clear()
    await traced.start_brokers()
    await traced.drain()
    replays = [s for s in exporter.get_finished_spans() if s.name == "send SpSpool"]
    assert replays and replays[-1].status.is_unset  # the last one went out
    for replay in replays:
        assert replay.parent is None and replay.attributes and replay.attributes["rocksidecar.replay"] is True
        assert [link.context.span_id for link in replay.links] == [receive.context.span_id]
        assert hex_trace(replay) != TRACE_ID  # a trace of its own, linked


async def test_a_delayed_send_is_scheduled_then_published_with_a_link(
    traced: Stack, exporter: InMemorySpanExporter
) -> None:
    r = await traced.http.post(
        "/v1/messages", json={"topic": "SpLater", "body": "x", "delayMs": 100}, headers={"traceparent": TP}
    )
    assert r.json()["status"] == "SCHEDULED"
    got = by_name(exporter)
    receive, schedule = got["receive SpLater"], got["schedule SpLater"]
    assert receive.context is not None and schedule.parent is not None
    assert schedule.parent.span_id == receive.context.span_id and "send SpLater" not in got
    await traced.until_published(r.json()["deliverAt"])
    publish = by_name(exporter)["publish SpLater"]
    assert publish.kind is SpanKind.PRODUCER and publish.parent is None
    assert [link.context.span_id for link in publish.links] == [receive.context.span_id]


async def test_a_batch_is_one_receive_span_over_one_send(
    traced: Stack, exporter: InMemorySpanExporter
) -> None:
    msgs = [{"topic": "SpBatch", "body": str(i)} for i in range(3)]
    await traced.http.post("/v1/messages:batch", json={"messages": msgs}, headers={"traceparent": TP})
    got = by_name(exporter)
    receive, send = got["receive"], got["send SpBatch"]
    assert receive.attributes and receive.attributes["messaging.batch.message_count"] == 3
    assert send.parent is not None and receive.context is not None
    assert send.parent.span_id == receive.context.span_id
    # the three messages inherited the header's context: one link to it, not three
    assert [(f"{link.context.trace_id:032x}", link.context.is_remote) for link in receive.links] == [
        (TRACE_ID, True)
    ]


async def test_a_batch_links_once_to_each_distinct_context_of_its_messages(
    traced: Stack, exporter: InMemorySpanExporter
) -> None:
    """Messages with trace contexts of their own (a Spark row's column) and ones that inherit the
    header's: a link per distinct context, in the order the messages first carry it."""
    own = [f"00-{n:032x}-{n:016x}-01" for n in (0xA, 0xB)]
    msgs: list[dict[str, Any]] = [{"topic": "SpLinks", "body": str(i)} for i in range(2)]  # inherit TP
    msgs += [{"topic": "SpLinks", "body": "a", "properties": {TRACEPARENT_PROPERTY: own[0]}}] * 2
    msgs += [{"topic": "SpLinks", "body": "b", "properties": {TRACEPARENT_PROPERTY: own[1]}}]
    r = await traced.http.post("/v1/messages:batch", json={"messages": msgs}, headers={"traceparent": TP})
    assert r.status_code == 200, r.text
    receive = by_name(exporter)["receive"]
    linked = [f"00-{c.trace_id:032x}-{c.span_id:016x}-01" for c in (link.context for link in receive.links)]
    assert linked == [TP, *own]


async def test_nothing_is_recorded_while_tracing_is_off(make_stack: Callable[..., Any]) -> None:
    memory = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(memory))  # an SDK present, but not given to us
    assert not spans.ON
    async with make_stack() as stack:
        r = await stack.http.post(
            "/v1/messages", json={"topic": "SpOff", "body": "x"}, headers={"traceparent": TP}
        )
        assert r.status_code == 200
        (msg,) = stack.stored("SpOff")
        assert msg.properties[TRACEPARENT_PROPERTY] == TP  # propagated as given, no span of ours
    assert memory.get_finished_spans() == ()


def test_the_extra_is_off_unless_asked_for() -> None:
    assert spans.setup_from_env(False) is None and not spans.ON


def test_on_it_exports_over_otlp_with_a_batching_processor() -> None:
    flush = spans.setup_from_env(True, {"OTEL_EXPORTER_OTLP_PROTOCOL": "http/protobuf"})
    try:
        assert flush is not None and spans.ON
    finally:
        spans.configure(None)
        assert flush is not None
        flush()


async def test_a_consumed_delivery_is_process_then_deliver_in_the_sender_s_trace(
    exporter: InMemorySpanExporter,
) -> None:
    rec = Recorded([Answer(200)])
    sender_span = "b7ad6b7169203331"
    assert await rec.push()([message(**{TRACEPARENT_PROPERTY: TP})], MQ) is ConsumeStatus.SUCCESS
    process, deliver = process_then_deliver(exporter, TRACE_ID, sender_span)
    assert process.attributes and process.attributes["messaging.consumer.group.name"] == "G"
    assert deliver.attributes and deliver.attributes["rocksidecar.delivered"] is True
    assert rec.requests[0].headers["ce-traceparent"] == TP  # the app continues the sender's trace


async def test_an_undelivered_message_marks_its_process_span(exporter: InMemorySpanExporter) -> None:
    rec = Recorded([Answer(500)])
    assert await rec.push()([message()], MQ) is not ConsumeStatus.SUCCESS
    process = by_name(exporter)["process T"]
    assert (
        process.parent is None and process.attributes and process.attributes["error.type"] == "not_delivered"
    )


def test_json_logs_carry_the_current_span_s_trace_id(exporter: InMemorySpanExporter) -> None:
    import io
    import json
    import logging

    from rocksidecar.app.logs import JsonFormatter

    out = io.StringIO()
    handler = logging.StreamHandler(out)
    handler.setFormatter(JsonFormatter())
    log = logging.getLogger("tests.tracing.json")
    log.addHandler(handler)
    log.propagate = False
    try:
        log.warning("outside")
        with spans._tracer.start_as_current_span("x") as span:
            log.warning("inside")
    finally:
        log.removeHandler(handler)
    outside, inside = (json.loads(line) for line in out.getvalue().splitlines())
    assert "trace_id" not in outside
    assert inside["trace_id"] == f"{span.get_span_context().trace_id:032x}"


async def test_an_unsampled_request_takes_the_sample_free_path(
    traced: Stack, exporter: InMemorySpanExporter
) -> None:
    unsampled = f"00-{TRACE_ID}-b7ad6b7169203331-00"
    r = await traced.http.post(
        "/v1/messages", json={"topic": "SpUnsampled", "body": "x"}, headers={"traceparent": unsampled}
    )
    assert r.status_code == 200
    assert exporter.get_finished_spans() == ()
    (msg,) = traced.stored("SpUnsampled")
    assert msg.properties[TRACEPARENT_PROPERTY] == unsampled  # passed on as it came, no span of ours


async def test_a_sampler_that_ignores_the_parent_still_gets_its_spans(make_stack: Callable[..., Any]) -> None:
    memory = InMemorySpanExporter()
    provider = TracerProvider(sampler=ALWAYS_ON)  # samples even under an unsampled parent
    provider.add_span_processor(SimpleSpanProcessor(memory))
    spans.configure(provider)
    try:
        async with make_stack() as stack:
            await stack.http.post(
                "/v1/messages",
                json={"topic": "SpAlways", "body": "x"},
                headers={"traceparent": f"00-{TRACE_ID}-b7ad6b7169203331-00"},
            )
    finally:
        spans.configure(None)
    assert {"receive SpAlways", "send SpAlways"} <= {s.name for s in memory.get_finished_spans()}


@pytest.mark.parametrize(("low", "recorded"), [(RATIO.bound, False), (RATIO.bound - 1, True)])
async def test_a_root_the_ratio_sampler_drops_takes_the_sample_free_path(
    make_stack: Callable[..., Any], low: int, recorded: bool
) -> None:
    """No traceparent under parentbased_traceidratio: a root the ratio drops makes no span below it but
    its trace context is carried on (flags 00: unsampled); one it keeps is the usual span tree."""
    trace_id = (9 << 64) | low
    memory = InMemorySpanExporter()
    provider = TracerProvider(sampler=ParentBasedTraceIdRatio(0.5), id_generator=FixedIds(trace_id, False))
    provider.add_span_processor(SimpleSpanProcessor(memory))
    spans.configure(provider)
    try:
        async with make_stack() as stack:
            r = await stack.http.post("/v1/messages", json={"topic": "SpRatio", "body": "x"})
            assert r.status_code == 200
            (msg,) = stack.stored("SpRatio")
    finally:
        spans.configure(None)
    carried = msg.properties[TRACEPARENT_PROPERTY]
    assert carried.startswith(f"00-{trace_id:032x}-") and carried.endswith("-01" if recorded else "-00")
    got = by_name(memory)
    if not recorded:
        assert got == {}
        return
    receive, send = got["receive SpRatio"], got["send SpRatio"]
    assert receive.parent is None and receive.context is not None and hex_trace(receive) == f"{trace_id:032x}"
    assert send.parent is not None and send.parent.span_id == receive.context.span_id
    assert carried == f"00-{trace_id:032x}-{receive.context.span_id:016x}-01"


MQ_T = MessageQueue("T", "broker-a", 1)


class _Stored:
    """A sender that stores at once and notes the trace id a log line would carry there."""

    def __init__(self) -> None:
        self.seen: list[dict[str, str]] = []

    async def send(self, msg: Message, **kwargs: Any) -> SendResult:
        self.seen.append(spans.current_trace_fields())
        return SendResult(SendStatus.SEND_OK, "ID", "7F00000100002A9F0000000000000001", MQ_T, 1)


async def test_logs_on_the_sample_free_path_carry_the_request_s_trace_id(
    exporter: InMemorySpanExporter,
) -> None:
    """Under an unsampled request, log lines carry its trace id and the request's sends make no span; a
    span of ours started below it (a background send) is current in its block, with its own trace."""
    inner = _Stored()
    request = spans.TracedSender(inner, background=False)
    background = spans.TracedSender(inner, background=True)
    unsampled = f"00-{TRACE_ID}-b7ad6b7169203331-00"

    async def handle(m: Message) -> list[dict[str, str]]:
        await request.send(m)
        await background.send(m)
        await request.send(m)  # the request's again after the background span's block
        return inner.seen

    msg = Message("T", b"x", properties={TRACEPARENT_PROPERTY: unsampled})
    in_request, in_background, again = await spans.receive(msg, handle)
    (span,) = exporter.get_finished_spans()
    assert span.name == "send T" and span.attributes and span.attributes["rocksidecar.replay"] is True
    assert in_request == again == {"trace_id": TRACE_ID}
    assert in_background == {"trace_id": hex_trace(span)} != in_request
    assert spans.current_trace_fields() == {}  # after the request: nothing


async def test_under_a_sampled_request_the_spans_below_and_the_logs_find_its_receive_span(
    exporter: InMemorySpanExporter,
) -> None:
    """The receive span of a sampled request is not made current in OpenTelemetry's context (the lite
    path marks it itself): the request's send spans and an INTERNAL span started below it are its
    children, log lines carry its trace id, and a background send below it is a trace of its own whose
    block logs its own id."""
    inner = _Stored()
    request = spans.TracedSender(inner, background=False)
    background = spans.TracedSender(inner, background=True)

    async def handle(m: Message) -> list[dict[str, str]]:
        await request.send(m)
        await background.send(m)
        await spans.internal("spool", "T", 1, request.send(m))  # a send inside a span of ours
        return inner.seen

    msg = Message("T", b"x", properties={TRACEPARENT_PROPERTY: TP})
    in_request, in_background, in_spool = await spans.receive(msg, handle)
    got = {(s.name, s.parent.span_id if s.parent else None): s for s in exporter.get_finished_spans()}
    receive = next(s for (name, _), s in got.items() if name == "receive T")
    spool = next(s for (name, _), s in got.items() if name == "spool T")
    assert receive.context is not None and spool.context is not None and spool.parent is not None
    assert spool.parent.span_id == receive.context.span_id
    sends = [s for (name, _), s in got.items() if name == "send T" and s.parent is not None]
    parents = sorted(s.parent.span_id for s in sends if s.parent is not None)
    assert parents == sorted([receive.context.span_id, spool.context.span_id])  # the replay's is a root
    assert in_request == in_spool == {"trace_id": TRACE_ID}
    replay = next(
        s for s in exporter.get_finished_spans() if s.attributes and s.attributes.get("rocksidecar.replay")
    )
    assert in_background == {"trace_id": hex_trace(replay)} != in_request
    assert spans.current_trace_fields() == {}
