"""app.tracing.fast: a request's receive and send spans recorded as FastSpans when the loop's processor is
the one, giving the OTLP request the LiteSpans give, span by span (the same random ids drawn in the same
order: only the times differ, and they are checked, then set aside)."""

from __future__ import annotations

import dataclasses
import enum
import logging
import random
import re
from collections.abc import Awaitable, Callable, Iterator
from typing import Any

import pytest
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.sdk.trace.sampling import ALWAYS_ON, Decision, ParentBasedTraceIdRatio
from opentelemetry.trace import SpanKind, StatusCode

from rocksidecar.app.tracing import loop_export, otlp, spans
from rocksidecar.app.tracing.context import TRACEPARENT_PROPERTY, TRACESTATE_PROPERTY, TraceContext, inherit
from rocksidecar.app.tracing.fast import FastSpan, Recorder
from rocksidecar.app.tracing.loop_export import LoopBatchProcessor, settings
from rocksidecar.app.tracing.otlp import encode_bytes, shape_bytes
from rocksidecar.rmq import Message, SendResult
from rocksidecar.rmq.errors import BrokerError, SendFailed
from rocksidecar.rmq.message import MessageQueue
from rocksidecar.rmq.result import SendStatus

TP = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"
STATE = "rojo=00f067aa0ba902b7,congo=t61rcWkgMzE"
RESULT = SendResult(
    SendStatus.SEND_OK, "ID", "7F00000100002A9F0000000000000001", MessageQueue("T", "b-1", 3), 2
)


class _Captured:
    """A transport whose collector takes every request; the bodies kept."""

    def __init__(self) -> None:
        self.bodies: list[bytes] = []

    async def send(self, body: bytes, timeout_s: float) -> None:
        self.bodies.append(body)

    async def close(self) -> None:
        pass


def _loop_processor() -> tuple[LoopBatchProcessor, _Captured]:
    config = settings({"OTEL_EXPORTER_OTLP_PROTOCOL": "http/protobuf"})
    assert config is not None
    processor = LoopBatchProcessor(config)
    captured = processor._transport = _Captured()
    return processor, captured


@pytest.fixture
def provider() -> Iterator[tuple[TracerProvider, LoopBatchProcessor, _Captured]]:
    made = TracerProvider(shutdown_on_exit=False)
    processor, captured = _loop_processor()
    made.add_span_processor(processor)
    try:
        yield made, processor, captured
    finally:
        spans.configure(None)


class _Sender:
    """A sender that answers RESULT, or raises ``failure``; it notes the message it was given."""

    def __init__(self, failure: BaseException | None = None) -> None:
        self.failure = failure
        self.got: list[Message] = []

    async def send(self, msg: Message, **kwargs: Any) -> SendResult:
        self.got.append(msg)
        if self.failure is not None:
            raise self.failure
        return RESULT


class _Spool:
    async def spool(self, record: Any, due_ms: int | None = None) -> object:
        return None


class _Status(enum.Enum):
    SENT = "SENT"


class _Outcome:
    """A request's outcome as the sidecar's are: its status an Enum member (one attribute mapping per
    outcome, cached by the encoder: the usual request's path, otlp._pair)."""

    status = _Status.SENT


class _PlainOutcome:
    status = "SENT"  # a status that is not an Enum member: its attribute made per request


Scenario = Callable[[], Awaitable[list[Message]]]


def _sent(
    properties: dict[str, str],
    *,
    tags: str | None = None,
    keys: tuple[str, ...] = (),
    msg_id: str = "MSGID",
    outcome: type = _Outcome,
) -> Scenario:
    async def run() -> list[Message]:
        inner = _Sender()
        sender = spans.TracedSender(inner, background=False)

        async def handle(m: Message) -> object:
            await sender.send(m)
            return outcome()

        await spans.receive(Message("T", b"body", tags, keys, properties, 0, msg_id), handle)
        return inner.got

    return run


def _spooled() -> Scenario:
    """A send every attempt of which failed (its events, its error), then the spool span below the
    receive span."""

    async def run() -> list[Message]:
        failure = SendFailed("all failed", [], BrokerError("busy", code=2, remark="busy"))
        failure.attempts = ["broker-a: busy", "broker-b: busy"]  # type: ignore[list-item]
        inner = _Sender(failure)
        sender = spans.TracedSender(inner, background=False)
        spool = spans.TracedSpool(_Spool())

        async def handle(m: Message) -> None:
            try:
                await sender.send(m)
            except SendFailed:
                record = Message("T", b"body")
                await spool.spool(record)

        await spans.receive(Message("T", b"body", None, (), {TRACEPARENT_PROPERTY: TP}, 0, "MSGID"), handle)
        return inner.got

    return run


def _acting(act: Callable[[Any], None]) -> Scenario:
    """Code that ``act``s on the request's receive span, then sends."""

    async def run() -> list[Message]:
        inner = _Sender()

        async def handle(m: Message) -> None:
            receiving = spans._RECEIVING.get()
            assert receiving is not None
            act(receiving)
            await spans.TracedSender(inner, background=False).send(m)

        await spans.receive(Message("T", b"body", None, (), {TRACEPARENT_PROPERTY: TP}, 0, "MSGID"), handle)
        return inner.got

    return run


def _rename_and_reset(span: Any) -> None:
    """Renames the span and sets one of its leading attributes again."""
    span.update_name("receive renamed")
    span.set_attribute("messaging.destination.name", "Other")
    span.set_status(StatusCode.ERROR, "said so")


def _list_attribute(span: Any) -> None:
    """The span's one attribute a list (not hashable, never cached); the handler answers no outcome."""
    span.set_attribute("app.labels", ["a", "b"])


async def _request(
    setup: tuple[TracerProvider, LoopBatchProcessor, _Captured], scenario: Scenario, *, fast: bool
) -> tuple[ExportTraceServiceRequest, list[Message], list[type]]:
    provider, processor, captured = setup
    spans.configure(provider, fast=fast)
    random.seed(31)  # the same ids, drawn in the same order, on either path
    sent = await scenario()
    kinds = [type(s) for s in processor._queue]
    await processor._drain()
    (body,) = captured.bodies
    captured.bodies.clear()
    return ExportTraceServiceRequest.FromString(body), sent, kinds


def _timeless(request: ExportTraceServiceRequest) -> ExportTraceServiceRequest:
    """``request`` with its spans' and events' times checked (set, in order) and zeroed, and the line
    numbers of a recorded exception's stack trace too."""
    for resource in request.resource_spans:
        for scope in resource.scope_spans:
            for span in scope.spans:
                assert 0 < span.start_time_unix_nano <= span.end_time_unix_nano
                span.start_time_unix_nano = span.end_time_unix_nano = 0
                for event in span.events:
                    assert event.time_unix_nano > 0
                    event.time_unix_nano = 0
                    for a in event.attributes:  # the two paths raise through different lines of spans.py
                        if a.key == "exception.stacktrace":
                            a.value.string_value = re.sub(r"line \d+", "line N", a.value.string_value)
    return request


SCENARIOS = {
    "sampled traceparent": _sent({TRACEPARENT_PROPERTY: TP}),
    "its trace state": _sent({TRACEPARENT_PROPERTY: TP, TRACESTATE_PROPERTY: STATE}),
    "tags and keys": _sent({TRACEPARENT_PROPERTY: TP}, tags="TagA", keys=("k1", "k2")),
    "a root": _sent({}),
    "a non-ASCII message id": _sent({TRACEPARENT_PROPERTY: TP}, msg_id="MSGID-é"),
    "a message id too long for one-byte lengths": _sent({TRACEPARENT_PROPERTY: TP}, msg_id="M" * 200),
    "a status that is not an Enum member": _sent({TRACEPARENT_PROPERTY: TP}, outcome=_PlainOutcome),
    "failed then spooled": _spooled(),
    "renamed and reset": _acting(_rename_and_reset),
    "a list as the receive span's one attribute": _acting(_list_attribute),
}


@pytest.mark.parametrize("name", SCENARIOS)
async def test_fast_spans_give_the_lite_spans_request(
    name: str, provider: tuple[TracerProvider, LoopBatchProcessor, _Captured]
) -> None:
    scenario = SCENARIOS[name]
    fast, fast_sent, fast_kinds = await _request(provider, scenario, fast=True)
    lite, lite_sent, lite_kinds = await _request(provider, scenario, fast=False)
    assert FastSpan in fast_kinds and FastSpan not in lite_kinds  # the paths under comparison
    assert _timeless(fast) == _timeless(lite)
    spans_of = [s for r in fast.resource_spans for sc in r.scope_spans for s in sc.spans]
    assert len(spans_of) >= 2
    # the message sent on carries the receive span's context, on either path
    assert [m.properties for m in fast_sent] == [m.properties for m in lite_sent]
    receive = next(s for s in spans_of if s.kind == SpanKind.SERVER.value + 1)
    carried = fast_sent[0].properties[TRACEPARENT_PROPERTY]
    assert carried[:53] == f"00-{receive.trace_id.hex()}-{receive.span_id.hex()}-"


def _twice(scenario: Scenario) -> Scenario:
    """``scenario`` run twice: the first request puts its outcome attribute in the encoder's cache, the
    second reads it there."""

    async def run() -> list[Message]:
        return await scenario() + await scenario()

    return run


@pytest.mark.parametrize(
    ("name", "one_piece"),
    [
        ("sampled traceparent", True),
        ("a root", True),
        ("a non-ASCII message id", True),
        ("a message id too long for one-byte lengths", False),
    ],
)
async def test_which_requests_spans_are_written_in_one_piece(
    name: str,
    one_piece: bool,
    provider: tuple[TracerProvider, LoopBatchProcessor, _Captured],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    written: list[bool] = []
    whole = otlp._pair

    def pair(span: FastSpan, kept: Any) -> bytes | None:
        got = whole(span, kept)
        written.append(got is not None)
        return got

    monkeypatch.setattr(otlp, "_pair", pair)
    fast, _, _ = await _request(provider, _twice(SCENARIOS[name]), fast=True)
    lite, _, _ = await _request(provider, _twice(SCENARIOS[name]), fast=False)
    # both requests took the one-piece path (the first too, its outcome encoded then), or neither did
    assert written and set(written) == {one_piece}
    assert _timeless(fast) == _timeless(lite)
    assert len([s for r in fast.resource_spans for sc in r.scope_spans for s in sc.spans]) == 4


OWN = "00-11111111111111111111111111111111-2222222222222222-01"  # a message's own (a Spark row's column)


@pytest.mark.parametrize("own", [None, OWN], ids=["no own context", "its own context"])
@pytest.mark.parametrize(
    "ctx",
    [TraceContext(TP, STATE), TraceContext(TP), TraceContext(TP[:-2] + "00"), None],
    ids=["sampled with state", "sampled", "unsampled", "no request context"],
)
async def test_opened_with_the_request_s_context_is_opened_on_the_inherited_message(
    own: str | None,
    ctx: TraceContext | None,
    provider: tuple[TracerProvider, LoopBatchProcessor, _Captured],
) -> None:
    """app.api.operations hands the request's context to ``opened`` (a message built once): the
    message handed on and the span are what inheriting it first, then opening, gives."""
    made = provider[0]
    spans.configure(made)
    msg = Message("T", b"body", properties={} if own is None else {TRACEPARENT_PROPERTY: own, "a": "b"})
    got = []
    for args in ((msg, ctx), (msg if ctx is None else inherit(msg, ctx),)):
        random.seed(7)  # the same ids on either way
        carried, span, held = spans.opened(*args)
        spans.closed(span, held)
        got.append((carried.properties, None if span is None else span.get_span_context()))
    assert got[0] == got[1]
    expected = own or (ctx.traceparent if ctx else None)
    if expected is not None and expected.endswith("01"):  # sampled: the receive span's context is carried
        assert got[0][1] is not None and got[0][0][TRACEPARENT_PROPERTY][3:35] == expected[3:35]
    assert spans._FREE.get() is None and spans._RECEIVING.get() is None  # closed reset both marks


async def test_the_request_s_spans_are_one_entry_of_the_loop_processor_s_queue(
    provider: tuple[TracerProvider, LoopBatchProcessor, _Captured],
) -> None:
    """The receive span keeps the send that went out under it: one object, one entry (two spans)."""
    made, processor, _ = provider
    spans.configure(made)
    await SCENARIOS["sampled traceparent"]()
    (receive,) = processor._queue
    assert isinstance(receive, FastSpan) and receive._sent is not None
    shape, send_id, start, end, facts, result = receive._sent
    assert shape.name == "send T" and receive._start <= start <= end <= receive._end
    assert facts == ("MSGID", None, (), 4) and result is RESULT  # the message's facts: not its body
    assert receive.get_span_context().trace_id == int(TP[3:35], 16) and len(send_id) == 8
    assert receive._parent is not None and receive._parent.hex() == TP[36:52] and receive._shape.remote
    assert not receive.is_recording()
    assert loop_export._spans(receive) == 2
    request = ExportTraceServiceRequest.FromString(encode_bytes([receive]))
    send, received = request.resource_spans[0].scope_spans[0].spans
    assert send.parent_span_id == received.span_id and send.span_id == send_id


async def test_a_batch_holds_at_most_its_size_in_spans(
    provider: tuple[TracerProvider, LoopBatchProcessor, _Captured],
) -> None:
    """OTEL_BSP_MAX_EXPORT_BATCH_SIZE counts spans: an entry that keeps its send counts two."""
    made, processor, captured = provider
    spans.configure(made)
    for _ in range(3):
        await SCENARIOS["sampled traceparent"]()
    processor.config = dataclasses.replace(processor.config, max_batch=4)
    batch, count = processor._take()
    assert len(batch) == 2 and count == 4 and len(processor._queue) == 1
    assert [loop_export._spans(s) for s in batch] == [2, 2]
    processor._queue.extendleft(reversed(batch))
    await processor._drain()
    assert processor.exported == 6 and len(captured.bodies) == 2


def test_another_processor_keeps_the_lite_spans() -> None:
    """The in-memory exporter (or any processor beside the loop's) sees SDK spans: no Recorder."""
    memory = TracerProvider(shutdown_on_exit=False)
    memory.add_span_processor(SimpleSpanProcessor(InMemorySpanExporter()))
    assert Recorder.of(spans._lite(memory.get_tracer("t")), shape_bytes) is None
    both = TracerProvider(shutdown_on_exit=False)
    both.add_span_processor(_loop_processor()[0])
    both.add_span_processor(SimpleSpanProcessor(InMemorySpanExporter()))
    assert Recorder.of(spans._lite(both.get_tracer("t")), shape_bytes) is None
    alone = TracerProvider(shutdown_on_exit=False)
    alone.add_span_processor(_loop_processor()[0])
    assert Recorder.of(spans._lite(alone.get_tracer("t")), shape_bytes) is not None


def test_a_sampler_asked_per_span_keeps_the_lite_spans() -> None:
    """A sampler whose answers are not known from its fields (a subclass with its own should_sample)
    is asked for every span: LiteSpans; a ParentBased ratio's are known: FastSpans."""
    asked = TracerProvider(sampler=_Asked(Decision.RECORD_AND_SAMPLE), shutdown_on_exit=False)
    asked.add_span_processor(_loop_processor()[0])
    assert Recorder.of(spans._lite(asked.get_tracer("t")), shape_bytes) is None
    ratio = TracerProvider(sampler=ParentBasedTraceIdRatio(0.5), shutdown_on_exit=False)
    ratio.add_span_processor(_loop_processor()[0])
    assert Recorder.of(spans._lite(ratio.get_tracer("t")), shape_bytes) is not None


class _Asked(type(ALWAYS_ON)):  # type: ignore[misc]
    """ALWAYS_ON's class with its own should_sample: the lite tracer must ask it."""

    def should_sample(self, *args: Any, **kwargs: Any) -> Any:
        return super().should_sample(*args, **kwargs)


async def test_a_sidecar_s_request_is_two_fast_spans_in_its_trace(
    provider: tuple[TracerProvider, LoopBatchProcessor, _Captured], make_stack: Callable[..., Any]
) -> None:
    """Through the HTTP API (app.api.operations' enter and leave): the request's receive and send spans
    are FastSpans, exported in the request's trace, and the stored message carries the receive span."""
    made, processor, captured = provider
    spans.configure(made)
    async with make_stack() as stack:
        r = await stack.http.post(
            "/v1/messages", json={"topic": "FastT", "body": "x"}, headers={"traceparent": TP}
        )
        assert r.status_code == 200
        assert [type(s) for s in processor._queue] == [FastSpan]
        await processor._drain()
        (msg,) = stack.stored("FastT")
    (body,) = captured.bodies
    request = ExportTraceServiceRequest.FromString(body)
    got = {s.name: s for r in request.resource_spans for sc in r.scope_spans for s in sc.spans}
    receive, send = got["receive FastT"], got["send FastT"]
    assert receive.trace_id.hex() == send.trace_id.hex() == TP[3:35]
    assert receive.parent_span_id.hex() == TP[36:52] and send.parent_span_id == receive.span_id
    attributes = {a.key: a.value for a in send.attributes}
    assert attributes["messaging.message.id"].string_value == r.json()["id"]
    assert attributes["messaging.rocketmq.broker"].string_value.startswith("broker-")
    outcome = {a.key: a.value.string_value for a in receive.attributes}["rocksidecar.outcome"]
    assert outcome == r.json()["status"]
    assert msg.properties[TRACEPARENT_PROPERTY] == f"00-{TP[3:35]}-{receive.span_id.hex()}-01"


async def test_a_level_2_tracestate_key_logs_nothing_on_the_fast_path(
    provider: tuple[TracerProvider, LoopBatchProcessor, _Captured],
    make_stack: Callable[..., Any],
    caplog: pytest.LogCaptureFixture,
) -> None:
    """A digit-first key (W3C Level 2, which app.tracing.context takes) made OpenTelemetry's from_header
    log a warning per sampled request and drop the whole tracestate; the member it takes stays."""
    made, processor, captured = provider
    spans.configure(made)
    caplog.set_level(logging.WARNING)
    headers = {"traceparent": TP, "tracestate": "1vendor=x,rojo=00f067aa0ba902b7"}
    async with make_stack() as stack:
        for _ in range(2):
            r = await stack.http.post("/v1/messages", json={"topic": "FastTs", "body": "x"}, headers=headers)
            assert r.status_code == 200
        assert {type(s) for s in processor._queue} == {FastSpan}
        await processor._drain()
    assert [r.getMessage() for r in caplog.records if r.levelno >= logging.WARNING] == []
    (body,) = captured.bodies
    request = ExportTraceServiceRequest.FromString(body)
    got = [s for r in request.resource_spans for sc in r.scope_spans for s in sc.spans]
    assert {s.name for s in got} == {"receive FastTs", "send FastTs"} and len(got) == 4
    assert {s.trace_state for s in got} == {"rojo=00f067aa0ba902b7"}
